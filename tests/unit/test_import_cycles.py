"""No import circle between modules of the three layers, not even one hidden from the interpreter
behind `if TYPE_CHECKING:` or inside a function (a lazy import): each is a circle in the design, the
kind issue 20 found in namesrv/routeinfo/ (RouteInfoManager's helpers importing it back to reach
into its tables)."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("namesrv", "actors", "clients")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its file (top level, under TYPE_CHECKING, in
    functions); `from pkg import x` counts as importing pkg.x when that is a module, else pkg."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def import_graph(root: Path, layers: tuple[str, ...]) -> dict[str, set[str]]:
    paths = {module_name(p, root): p for layer in layers for p in (root / layer).rglob("*.py")}
    known = set(paths)
    return {name: imports_of(name, path, known) for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as e:
        cycle: list[str] = e.args[1]
        return cycle
    return None


def test_the_modules_of_the_three_layers_import_without_a_circle() -> None:
    graph = import_graph(ROOT, LAYERS)
    assert len(graph) > 100 and graph["namesrv.routeinfo.processor"], "the walk finds the modules and their imports"
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or ())


@pytest.mark.parametrize("hidden", ["top", "type_checking", "lazy"])
def test_a_circle_is_found_however_the_import_is_written(tmp_path: Path, hidden: str) -> None:
    pkg = tmp_path / "namesrv" / "routeinfo"
    pkg.mkdir(parents=True)
    (tmp_path / "namesrv" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "manager.py").write_text("from namesrv.routeinfo.helper import helper\n")
    back = {
        "top": "from . import manager\n",
        "type_checking": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from namesrv.routeinfo.manager import Manager\n",
        "lazy": "def helper():\n    from namesrv.routeinfo import manager\n    return manager\n",
    }[hidden]
    (pkg / "helper.py").write_text(back)
    cycle = find_cycle(import_graph(tmp_path, ("namesrv",)))
    assert cycle is not None and set(cycle) == {"namesrv.routeinfo.manager", "namesrv.routeinfo.helper"}
