"""Fixtures shared by the tests that need a real local Ray (tests/ray, tests/e2e). Imported lazily,
so the pure unit tests never load Ray."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.time_budget import Budgets

RAY_MODULES = pytest.StashKey[set[str]]()
"""The test modules with a test that asks for the shared Ray (`ray_local`, directly or not)."""


def _release_shared_ray() -> None:
    if "tests.support.ray_cluster" in sys.modules:  # loaded only by tests that use Ray
        sys.modules["tests.support.ray_cluster"].release_shared_ray()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[RAY_MODULES] = {item.module.__name__ for item in items
                                 if isinstance(item, pytest.Function) and "ray_local" in item.fixturenames}
    schedule_by_file(items)


ONE_AT_A_TIME = ("tests/e2e/test_benchmarks_smoke.py", "tests/ray/chaos/", "tests/spark/")
"""Files that run one after the other on one worker (one group of work): the benchmarks, which
load every core by design, beside the chaos runs and Spark, whose invariants and detection delays
hold on a busy machine but not next to a benchmark (the Spark files also share one RayDP session)."""


def schedule_by_file(items: list[pytest.Item]) -> None:
    """How `bash run.sh test` spreads the tests over its workers (pytest-xdist, `--dist loadgroup`):
    a file is one unit of work, so its module-scoped deployment is made once, on one worker; the
    files of `ONE_AT_A_TIME` (and any test naming an `xdist_group`) are one unit together. The
    groups with the largest time budgets start first, so the workers finish together instead of one
    waiting on the chaos soak at the end. Without xdist only the order changes (a group's tests stay
    together, in file order)."""
    budgets = Budgets.load()

    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    def default_group(item: pytest.Item) -> str:
        file = file_of(item)
        return "one at a time" if file.startswith(ONE_AT_A_TIME) else file

    def group_of(item: pytest.Item) -> str:
        marker = item.get_closest_marker("xdist_group")
        return str(marker.args[0] if marker and marker.args else marker.kwargs["name"]) if marker else file_of(item)

    per_file: Counter[str] = Counter()
    per_group: dict[str, Counter[str]] = {}
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(default_group(item)))
        per_file[file_of(item)] += 1
        per_group.setdefault(group_of(item), Counter())[file_of(item)] += 1
    # a group's share of each file's budget, by its number of tests there
    budget = {group: sum(budgets.of(f) * n / per_file[f] for f, n in files.items())
              for group, files in per_group.items()}
    first_seen = {group: i for i, group in reversed(list(enumerate(group_of(item) for item in items)))}
    items.sort(key=lambda item: (-budget[group_of(item)], first_seen[group_of(item)]))


@pytest.fixture(scope="module", autouse=True)
def _ray_only_where_asked(request: pytest.FixtureRequest) -> None:
    """A module that asks for no Ray never finds the shared one running (its code may start a Ray
    of its own, or expect none)."""
    if request.module.__name__ not in request.config.stash.get(RAY_MODULES, set()):
        _release_shared_ray()


@pytest.fixture(scope="session")
def _ray_session() -> Iterator[None]:
    """Stops the shared local Ray at the end of the run (if any test started it)."""
    yield
    _release_shared_ray()


@pytest.fixture(scope="module")
def ray_local(request: pytest.FixtureRequest, _ray_session: None) -> str:
    """The run's shared local Ray (never someone else's cluster: started here with
    `address="local"`); yields a namespace of the module's own for its actors."""
    from tests.support.ray_cluster import shared_ray

    return shared_ray(request.module.__name__.rsplit(".", 1)[-1].replace("_", "-"))


@pytest.fixture
def deployments(ray_local: str, tmp_path: Path) -> Iterator[Any]:
    """Deploys clusters in fresh namespaces under tmp_path and tears them all down afterwards."""
    from tests.support.ray_cluster import DeploymentFactory

    factory = DeploymentFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()
