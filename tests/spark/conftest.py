"""Fixtures for the Spark tests: one Ray and one Spark session (RayDP) for all of tests/spark (its
files are one group of work, run together on one worker), because starting Spark costs ~20 s. Chaos
runs in these tests use the same Ray (their actors take no CPU)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

TINY_DATA = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
"""Spark interprets the plans instead of compiling them: these tests' data are a few hundred rows,
so compiling each query's Java costs more than running it (the analyses' tests took 64 s instead
of 84 s side by side). What the analyses compute is the same either way; `namesrv analyze` and
bench_analysis keep Spark's defaults."""


@pytest.fixture(scope="package")
def spark() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    pytest.importorskip("raydp")
    from clients.analysis.spark import SparkSettings, get_or_create_spark, stop_spark
    from tests.support.ray_cluster import release_shared_ray

    release_shared_ray()  # the Ray tests' shared Ray, if it runs: Spark gets one of its own
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield get_or_create_spark(SparkSettings(app_name="test-analysis", extra_configs=TINY_DATA), init_ray=False)
    finally:
        stop_spark()
        ray.shutdown()
