"""Fixtures shared by the tests that need a real local Ray (tests/ray, tests/e2e). Imported lazily,
so the pure unit tests never load Ray."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def ray_local(request: pytest.FixtureRequest) -> Iterator[str]:
    """A private local Ray for the module (never someone else's cluster); yields its namespace."""
    from tests.support.ray_cluster import local_ray

    prefix = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")
    with local_ray(prefix) as namespace:
        yield namespace


@pytest.fixture
def deployments(ray_local: str, tmp_path: Path) -> Iterator[Any]:
    """Deploys clusters in fresh namespaces under tmp_path and tears them all down afterwards."""
    from tests.support.ray_cluster import DeploymentFactory

    factory = DeploymentFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()
