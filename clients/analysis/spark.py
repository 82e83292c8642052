"""One shared Spark session on Ray (RayDP), configured for JDK 17 and a small machine.

Why one session: `init_spark` plus the first action costs ~15 s here, so tests and the report reuse
it. Why the flags: on JDK 17 Spark's Arrow/unsafe code needs `--add-opens` on every JVM RayDP
starts (app master, driver, executors); without them `ray.data.from_spark` fails. Why
PYSPARK_PYTHON: executors are JVMs inside Ray workers and start Python workers with whatever
`python3` is on PATH, which may lack pyspark (then `Dataset.to_spark`, mapInPandas and
`createDataFrame(list)` fail); pyspark 3.5 reads only the environment variable, not the
`spark.pyspark.python` setting, so it is set to this interpreter unless the user set it.
Stopping order matters: `raydp.stop_spark()` before `ray.shutdown()`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

JDK17_OPEN_PACKAGES: tuple[str, ...] = (
    "java.lang",
    "java.lang.invoke",
    "java.io",
    "java.net",
    "java.nio",
    "java.math",
    "java.text",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)

JAVA_OPTION_KEYS: tuple[str, ...] = (
    "spark.ray.raydp_app_master.extraJavaOptions",
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
)


INTERPRETED_PLANS: dict[str, str] = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""Spark interprets query plans instead of compiling them to Java: for a few thousand rows compiling
each query costs more than running it. What a query computes is the same either way."""


SHORT_RUN_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""For a Spark session that lives a few minutes on a few thousand rows (a smoke benchmark, the
tests): the C1 compiler only and one GC thread. C2's optimised code does not pay back what compiling
it costs in so short a run (tests/spark: 164 instead of 263 CPU-s side by side)."""


def jdk17_java_options() -> str:
    """`-XX:+IgnoreUnrecognizedVMOptions` keeps the same string harmless on JDK 8/11."""
    opens = [f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in JDK17_OPEN_PACKAGES]
    return " ".join(["-XX:+IgnoreUnrecognizedVMOptions", *opens])


@dataclass(frozen=True)
class SparkSettings:
    """Sized for a 2-core box by default: one executor with one core leaves a CPU for Ray actors."""

    app_name: str = "namesrv-analysis"
    num_executors: int = 1
    executor_cores: int = 1
    executor_memory: str = "1G"
    shuffle_partitions: int | None = None
    """Default 2 x total executor cores: Spark's 200 would make tiny tasks dominate."""
    jvm_options: str = ""
    """More JVM options for the driver and executors, after the JDK 17 ones (e.g. SHORT_RUN_JVM_OPTIONS)."""
    extra_configs: dict[str, str] = field(default_factory=dict)

    def configs(self) -> dict[str, str]:
        java_opts = f"{jdk17_java_options()} {self.jvm_options}".strip()
        partitions = self.shuffle_partitions or max(2, 2 * self.num_executors * self.executor_cores)
        conf = {key: java_opts for key in JAVA_OPTION_KEYS}
        conf.update(
            {
                "spark.sql.shuffle.partitions": str(partitions),
                "spark.default.parallelism": str(partitions),
                "spark.sql.session.timeZone": "UTC",
                # AQE turns every shuffle of these many-join plans into its own job: 25 jobs instead
                # of 5 for the divergence analysis, 2-4x slower at test size; partitions are few anyway.
                "spark.sql.adaptive.enabled": "false",
                "spark.sql.execution.arrow.pyspark.enabled": "true",
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
            }
        )
        for key, value in self.extra_configs.items():
            if key in JAVA_OPTION_KEYS:
                value = f"{java_opts} {value}"
            conf[key] = value
        return conf


class _State:
    lock = threading.Lock()
    session: SparkSession | None = None
    settings: SparkSettings | None = None
    owns_ray: bool = False


def _ensure_ray(init_ray: bool, num_cpus: int | None) -> None:
    import ray

    if ray.is_initialized():
        return
    if not init_ray:
        raise RuntimeError("Ray is not initialized; call ray.init() first or pass init_ray=True")
    cpus = num_cpus or os.cpu_count() or 2
    log.info("starting a local Ray (num_cpus=%d) for Spark", cpus)
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    _State.owns_ray = True


def get_or_create_spark(
    settings: SparkSettings | None = None, *, init_ray: bool = True, ray_num_cpus: int | None = None
) -> SparkSession:
    """The shared session, started on the current Ray (a local Ray is started if none is running).

    A second call returns the same session; different settings are logged and ignored, because
    RayDP supports one Spark cluster per driver.
    """
    settings = settings or SparkSettings()
    with _State.lock:
        if _State.session is not None:
            if settings != _State.settings:
                log.warning("a Spark session already runs with %s; ignoring %s", _State.settings, settings)
            return _State.session
        _ensure_ray(init_ray, ray_num_cpus)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        import raydp

        log.info(
            "starting Spark on Ray: %d executor(s) x %d core(s), %s",
            settings.num_executors,
            settings.executor_cores,
            settings.executor_memory,
        )
        session = raydp.init_spark(
            app_name=settings.app_name,
            num_executors=settings.num_executors,
            executor_cores=settings.executor_cores,
            executor_memory=settings.executor_memory,
            configs=settings.configs(),  # a fresh dict: RayDP mutates the one it gets
        )
        session.sparkContext.setLogLevel("ERROR")
        _State.session = session
        _State.settings = settings
        return session


def active_spark() -> SparkSession | None:
    return _State.session


def stop_spark(*, shutdown_ray: bool | None = None) -> None:
    """Stop Spark first, then Ray (only the Ray we started, unless told otherwise)."""
    with _State.lock:
        if _State.session is not None:
            import raydp

            try:
                raydp.stop_spark()
            finally:
                _State.session = None
                _State.settings = None
        stop_ray = _State.owns_ray if shutdown_ray is None else shutdown_ray
        if stop_ray:
            import ray

            if ray.is_initialized():
                ray.shutdown()
            _State.owns_ray = False
