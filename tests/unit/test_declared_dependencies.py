"""Every package the code imports is declared in pyproject.toml, and every benchmark finds what it
imports in the set `run.sh bench` installs for it, as on a fresh clone (where nothing arrives by the
accident of another extra being installed). Read from the sources (every import, lazy ones too)
and the installed packages' own metadata."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
OWN = {"namesrv", "actors", "clients", "tests", "benchmarks"}
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def group(extra: str) -> list[str]:
    return list(PROJECT["dependencies"]) + (list(PROJECT["optional-dependencies"][extra]) if extra else [])


def declared_anywhere() -> set[str]:
    every = list(PROJECT["dependencies"])
    for reqs in PROJECT["optional-dependencies"].values():
        every += reqs
    return {canonicalize_name(Requirement(r).name) for r in every}


def closure(requirements: list[str]) -> set[str]:
    """The distributions installing `requirements` brings, following each one's own requirements
    (with the extras asked for) in the installed metadata."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.requires(req.name) or []:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in {"", *req.extras}):
                todo.append(sub)
    return {name for name, _ in seen}


@cache
def distributions_of() -> dict[str, set[str]]:
    return {module: {canonicalize_name(d) for d in dists}
            for module, dists in metadata.packages_distributions().items()}


def third_party_imports(path: Path, local: frozenset[str]) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return {m for m in modules if m not in sys.stdlib_module_names and m not in OWN and m not in local}


def undeclared(files: list[Path], allowed: set[str], local: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """Imports (module -> files importing it) that no distribution in `allowed` provides."""
    missing: dict[str, list[str]] = {}
    for path in files:
        for module in sorted(third_party_imports(path, local)):
            if not distributions_of().get(module, set()) & allowed:
                missing.setdefault(module, []).append(str(path.relative_to(ROOT)))
    return missing


def bench_extras() -> dict[str, str]:
    """What `run.sh bench NAME` installs per benchmark ("" is the base set), read from run.sh."""
    script = (ROOT / "run.sh").read_text()
    block = re.search(r"^\s*bench\)(?P<body>.*?);;\s*$\n\s*namesrv\)", script, re.M | re.S)
    assert block, "run.sh has no bench job"
    chosen = dict(re.findall(r"^\s*(bench_\w+)\)[^\n]*?ensure_venv (\w+|\"\")", block["body"], re.M))
    names = sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py"))
    return {n: chosen.get(n, '""').strip('"') for n in names}


def test_every_import_of_the_package_and_the_tests_is_declared() -> None:
    files = [p for d in ("namesrv", "actors", "clients", "tests") for p in sorted((ROOT / d).rglob("*.py"))]
    assert not undeclared(files, declared_anywhere()), "declare these in pyproject.toml (and requirements.lock)"


@pytest.mark.parametrize("bench", sorted(bench_extras()))
def test_a_benchmark_finds_its_imports_in_the_set_run_sh_installs_for_it(bench: str) -> None:
    extra = bench_extras()[bench]
    local = frozenset(p.stem for p in (ROOT / "benchmarks").glob("*.py"))
    files = [ROOT / "benchmarks" / f"{bench}.py", ROOT / "benchmarks" / "_common.py"]
    source = files[0].read_text()
    files += [ROOT / "benchmarks" / f"{m}.py" for m in sorted(local)
              if re.search(rf"^\s*(from|import) {m}\b", source, re.M)]
    missing = undeclared(sorted(set(files)), closure(group(extra)), local)
    assert not missing, f"`bash run.sh bench {bench}` installs [{extra or 'base'}], which does not bring {missing}"
