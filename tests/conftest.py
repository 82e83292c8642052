"""Fixtures shared by the tests that need a real local Ray (tests/ray, tests/e2e). Imported lazily,
so the pure unit tests never load Ray."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

RAY_MODULES = pytest.StashKey[set[str]]()
"""The test modules with a test that asks for the shared Ray (`ray_local`, directly or not)."""


def _release_shared_ray() -> None:
    if "tests.support.ray_cluster" in sys.modules:  # loaded only by tests that use Ray
        sys.modules["tests.support.ray_cluster"].release_shared_ray()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[RAY_MODULES] = {item.module.__name__ for item in items
                                 if isinstance(item, pytest.Function) and "ray_local" in item.fixturenames}


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
