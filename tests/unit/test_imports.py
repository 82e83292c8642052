"""Every module of the three layers imports (mypy, with ignore_missing_imports, does not catch a
module that moved), and no import goes up a layer: clients -> actors -> namesrv, namesrv never Ray."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("namesrv", "actors", "clients")


def modules() -> list[str]:
    names = []
    for layer in LAYERS:
        package = importlib.import_module(layer)
        names.append(layer)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, f"{layer}.")]
    return sorted(names)


@pytest.mark.parametrize("name", modules())
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


def imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_flow_one_way(layer: str) -> None:
    higher = LAYERS[LAYERS.index(layer) + 1:]
    forbidden = higher + (("ray",) if layer == "namesrv" else ())
    wrong = {f"{p.relative_to(ROOT)}: {m}" for p in (ROOT / layer).rglob("*.py") for m in imported(p)
             if m.split(".")[0] in forbidden}
    assert not wrong, sorted(wrong)


PACKAGE_ORDER = ("clients.analysis", "clients.chaos", "clients.snapshots")
"""Inside clients: the analysis reads what the chaos harness writes, both use the snapshot dataset."""


def test_client_packages_import_one_way() -> None:
    """No package of PACKAGE_ORDER imports one before it, not even lazily inside a function."""
    wrong = set()
    for i, package in enumerate(PACKAGE_ORDER):
        earlier = PACKAGE_ORDER[:i]
        for path in (ROOT / package.replace(".", "/")).rglob("*.py"):
            wrong |= {f"{path.relative_to(ROOT)}: {m}" for m in imported(path)
                      if any(m == e or m.startswith(e + ".") for e in earlier)}
    assert not wrong, sorted(wrong)
