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
