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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[RAY_MODULES] = {item.module.__name__ for item in items
                                 if isinstance(item, pytest.Function) and "ray_local" in item.fixturenames}
    schedule_by_file(items)


ONE_AT_A_TIME = ("tests/e2e/test_benchmarks_smoke.py", "tests/ray/chaos/", "tests/spark/")
"""Files that run one after the other on one worker (one group of work): the benchmarks, which
load every core by design, beside the chaos runs and Spark, whose invariants and detection delays
hold on a busy machine but not next to a benchmark (the Spark files also share one RayDP session)."""


TEST_BED = ("tests/ray/hosts/", "tests/e2e/test_ray_up_hosts.py")
"""Files that make the multi-host test bed (network namespaces `nsrv-h*` on one bridge, a sweep of a
killed run's leftovers at start): one after the other on one worker, since two beds at once would
share names, addresses and the bridge, and each would sweep the other's hosts away."""


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def unit_of_work(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, "test bed" for `TEST_BED`'s, "one at a time" for
    `ONE_AT_A_TIME`'s."""
    file = nodeid.split("::", 1)[0]
    if file.startswith(TEST_BED):
        return "test bed"
    return "one at a time" if file.startswith(ONE_AT_A_TIME) else file


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scope scheduling with our units of work as the scopes (a whole unit goes to
    one worker). Not its `xdist_group` marks: under pytest 9 they group nothing (xdist 3.8 renames
    the test ids through an attribute pytest 9 no longer reads)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnitOfWork(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(nodeid)

    return ByUnitOfWork(config, log)


def schedule_by_file(items: list[pytest.Item]) -> None:
    """The order `bash run.sh test` hands the units of work (`unit_of_work`) to its two pytest-xdist
    workers: the largest time budgets first, so the workers finish together instead of one waiting
    on the chaos soak at the end. Without xdist only the order changes (a unit's tests stay
    together, in file order)."""
    budgets = Budgets.load()
    per_file: Counter[str] = Counter()
    per_unit: dict[str, Counter[str]] = {}
    for item in items:
        file = _file_of(item)
        per_file[file] += 1
        per_unit.setdefault(unit_of_work(item.nodeid), Counter())[file] += 1
    # a unit's share of each file's budget, by its number of tests there
    budget = {unit: sum(budgets.of(f) * n / per_file[f] for f, n in files.items())
              for unit, files in per_unit.items()}
    first_seen = {unit: i for i, unit in enumerate(per_unit)}  # in collection order
    items.sort(key=lambda item: (-budget[unit_of_work(item.nodeid)], first_seen[unit_of_work(item.nodeid)]))


PURE_TESTS = "tests.unit."
"""The unit tests of the pure core and of the clients' logic: they start no Ray and call none, so a
shared Ray left running by the module before them stays up for the next Ray module (restarting it
costs seconds of CPU each time a worker passes from a Ray module to a unit module and back)."""


@pytest.fixture(scope="module", autouse=True)
def _ray_only_where_asked(request: pytest.FixtureRequest) -> None:
    """A module that asks for no Ray never finds the shared one running (its code may start a Ray
    of its own, or expect none), unless it is a unit test (`PURE_TESTS`), which never touches one."""
    name = request.module.__name__
    if name not in request.config.stash.get(RAY_MODULES, set()) and not name.startswith(PURE_TESTS):
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
