"""Fixtures shared by the tests that need a real local Ray (tests/ray, tests/e2e). Imported lazily,
so the pure unit tests never load Ray."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def _ray_session() -> Iterator[None]:
    """Stops the shared local Ray at the end of the run (if any test started it)."""
    yield
    import sys

    if "tests.support.ray_cluster" in sys.modules:
        sys.modules["tests.support.ray_cluster"].release_shared_ray()


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
