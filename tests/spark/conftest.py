"""Fixtures for the Spark tests: one Ray and one Spark session (RayDP) for all of tests/spark (its
files are one group of work, run together on one worker), because starting Spark costs ~20 s. Chaos
runs in these tests use the same Ray (their actors take no CPU)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="package")
def spark() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    pytest.importorskip("raydp")
    from clients.analysis.spark import (
        INTERPRETED_PLANS,
        SHORT_RUN_JVM_OPTIONS,
        SparkSettings,
        get_or_create_spark,
        stop_spark,
    )
    from tests.support.ray_cluster import release_shared_ray

    release_shared_ray()  # the Ray tests' shared Ray, if it runs: Spark gets one of its own
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:  # interpreted plans and C1-only JVMs: these tests' data are a few hundred rows, their session
        # lives minutes; `namesrv analyze` and full bench_analysis runs keep Spark's defaults
        settings = SparkSettings(app_name="test-analysis", jvm_options=SHORT_RUN_JVM_OPTIONS,
                                 extra_configs=INTERPRETED_PLANS)
        yield get_or_create_spark(settings, init_ray=False)
    finally:
        stop_spark()
        ray.shutdown()
