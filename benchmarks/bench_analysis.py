"""Route snapshots from Ray actors into Spark and through every analysis: which way in is faster?

NameServer actors (each a real RouteInfoManager on a simulated clock: brokers heartbeat, die, are
noticed at once by one NameServer and by expiry on the others, restart) return snapshot Arrow
tables into Ray's object store. From the same object refs the rows reach Spark two (optionally
three) ways, timed per stage, then every analysis runs on each resulting DataFrame:

  bridge      ray.data.from_arrow_refs(refs).to_spark(spark)  (RayDP: executors start Python
              workers that fetch the tables and hand them over through pandas)
  bridge-ipc  the actors re-encode each table as Arrow IPC bytes; the executor JVMs read those
              straight from the object store (`arrow_ipc_refs_to_spark`; no Python, no pandas)
  parquet     ray.get(refs) -> pyarrow Parquet dataset (append_snapshots) -> spark.read.parquet
  driver      ray.get(refs) -> pandas -> spark.createDataFrame (Arrow-enabled)  [--paths driver]

Each load stage ends with the DataFrame cached and counted, so the analyses compare like for like.

    python benchmarks/bench_analysis.py --rows 1000000
    python benchmarks/bench_analysis.py --quick   # 20,000 rows, bridge only, one analysis, no pipeline run,
                                                  # interpreted plans, C1-only JVMs
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import ray

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _analysis_workload import SnapshotSource, fault_schedule
from _common import print_machine

from clients.analysis import fault_jobs, jobs, placement
from clients.analysis.bridge import arrow_ipc_refs_to_spark
from clients.analysis.faults import faults_to_spark
from clients.analysis.spark import (
    INTERPRETED_PLANS,
    SHORT_RUN_JVM_OPTIONS,
    SparkSettings,
    get_or_create_spark,
    stop_spark,
)
from clients.snapshots.dataset import append_snapshots, dataset_spark_schema, read_snapshots_spark
from namesrv.routeinfo.snapshot import arrow_schema

JOBS: tuple[str, ...] = (
    "divergence_instants",
    "divergence_windows",
    "liveness_intervals",
    "detection_delays",
    "stale_route_exposure",
    "topic_placement_skew",
)


# --------------------------------------------------------------------------------------- timing
class Stopwatch:
    """Per (path, stage): the best of its runs (repeats smooth out JIT warm-up and a noisy machine)."""

    def __init__(self) -> None:
        self.results: dict[tuple[str, str], float] = {}
        self.runs: dict[tuple[str, str], list[float]] = {}

    @contextmanager
    def stage(self, path: str, stage: str) -> Iterator[None]:
        started = time.perf_counter()
        print(f"  {path:8s} {stage} ...", end="", flush=True)
        yield
        elapsed = time.perf_counter() - started
        self.runs.setdefault((path, stage), []).append(elapsed)
        self.results[(path, stage)] = min(self.runs[(path, stage)])
        print(f" {elapsed:.2f} s", flush=True)


def versions() -> str:
    """The Spark side's versions (the machine itself is printed by _common)."""
    try:
        java = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, check=False
        ).stderr.splitlines()[0]
    except OSError:
        java = "java: not found"
    import pyspark
    import raydp

    return (
        f"raydp {getattr(raydp, '__version__', '?')}, pyspark {pyspark.__version__}, pyarrow {pa.__version__}; {java}"
    )


ANALYSES = ("divergence_instants", "divergence_windows", "liveness_intervals", "detection_delays",
            "stale_route_exposure", "topic_placement_skew")


def run_analyses(spark: Any, df: Any, faults: Any, path: str, watch: Stopwatch,
                 only: tuple[str, ...] = ANALYSES) -> dict[str, int]:
    analyses: dict[str, Callable[[], Any]] = {
        "divergence_instants": lambda: jobs.divergence_instants(spark, df),
        "divergence_windows": lambda: jobs.divergence_windows(spark, df),
        "liveness_intervals": lambda: jobs.liveness_intervals(spark, df),
        "detection_delays": lambda: fault_jobs.detection_delays(spark, df, faults),
        "stale_route_exposure": lambda: fault_jobs.stale_route_exposure(spark, df, faults),
        "topic_placement_skew": lambda: placement.topic_placement_skew(spark, df),
    }
    counts: dict[str, int] = {}
    for name, make in analyses.items():
        if name not in only:
            continue
        with watch.stage(path, name):
            result = make().cache()  # computed once, counted; the rows are what the report would write
            counts[name] = result.count()
            result.unpersist()
    return counts


def load_all(
    spark: Any,
    paths: list[str],
    refs: list[Any],
    sources: list[Any],
    total_rows: int,
    parquet_dir: Path,
    watch: Stopwatch,
) -> dict[str, Any]:
    """Every requested path from the same object refs to a cached, counted Spark DataFrame."""
    from pyspark.sql.types import StructType

    frames: dict[str, Any] = {}
    if "bridge" in paths:
        with watch.stage("bridge", "load: from_arrow_refs -> to_spark, cache+count"):
            df = ray.data.from_arrow_refs(refs).to_spark(spark).cache()
            assert df.count() == total_rows
        frames["bridge"] = df
    if "bridge-ipc" in paths:
        with watch.stage("bridge-ipc", "actors encode Arrow IPC bytes"):
            ipc_refs = [sources[i % len(sources)].encode_ipc.remote(r) for i, r in enumerate(refs)]
            ray.wait(ipc_refs, num_returns=len(ipc_refs), fetch_local=False)
        with watch.stage("bridge-ipc", "load: executor JVMs read the IPC blocks, cache+count"):
            df = arrow_ipc_refs_to_spark(spark, arrow_schema(), ipc_refs).cache()
            assert df.count() == total_rows
        frames["bridge-ipc"] = df
    if "parquet" in paths:
        with watch.stage("parquet", "ray.get to driver"):
            tables = ray.get(refs)
        with watch.stage("parquet", "write Parquet dataset (pyarrow)"):
            for table in tables:
                append_snapshots(parquet_dir, table)
        del tables
        with watch.stage("parquet", "load: validate + spark.read.parquet, cache+count"):
            df = read_snapshots_spark(spark, parquet_dir).cache()
            assert df.count() == total_rows
        frames["parquet"] = df
    if "driver" in paths:
        with watch.stage("driver", "load: ray.get -> pandas -> createDataFrame, cache+count"):
            pdf = pa.concat_tables(ray.get(refs)).to_pandas()
            schema = StructType([f for f in dataset_spark_schema().fields if f.name != "date"])
            df = spark.createDataFrame(pdf, schema=schema).cache()
            assert df.count() == total_rows
            del pdf
        frames["driver"] = df
    return frames


# --------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help="target snapshot rows (default %(default)s)")
    p.add_argument("--namesrvs", type=int, default=2)
    p.add_argument("--brokers", type=int, default=20)
    p.add_argument("--shared-topics", type=int, default=150, help="topics on every broker")
    p.add_argument("--auto-topics", type=int, default=10, help="single-broker topics per broker")
    p.add_argument("--period-ms", type=int, default=10_000, help="snapshot period")
    p.add_argument("--batch", type=int, default=25, help="snapshots per Arrow table an actor returns")
    p.add_argument(
        "--paths",
        default="bridge,bridge-ipc,parquet",
        help="comma list of bridge, bridge-ipc, parquet, driver",
    )
    p.add_argument("--no-analyses", action="store_true", help="only time the loading stages")
    p.add_argument("--analyses", default=",".join(ANALYSES),
                   help=f"comma list of the analyses to time (default all: {', '.join(ANALYSES)})")
    p.add_argument("--repeat", type=int, default=2, help="load rounds; the best of each stage is kept")
    p.add_argument("--executor-memory", default="2G")
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray started here")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--pipeline-duration", type=float, default=12.0,
                   help="then time the whole pipeline: a chaos run of this many seconds with snapshots, "
                        "then `namesrv analyze` of its directory (0: skip)")
    p.add_argument("--jvm-options", default="",
                   help="added to every JVM Spark starts (app master, driver, executors)")
    p.add_argument("--interpret", action="store_true",
                   help="Spark interprets query plans instead of compiling them (INTERPRETED_PLANS)")
    p.add_argument("--quick", action="store_true",
                   help="20,000 rows, the bridge path only, one load round, one analysis "
                        "(liveness_intervals, no warm-up), no pipeline run, interpreted plans, JVMs that "
                        f"JIT-compile less ({SHORT_RUN_JVM_OPTIONS}): a smoke run (tests/spark runs every analysis)")
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.paths, args.repeat, args.pipeline_duration = 20_000, "bridge", 1, 0.0
        args.analyses, args.jvm_options, args.interpret = "liveness_intervals", SHORT_RUN_JVM_OPTIONS, True
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    only = tuple(x.strip() for x in args.analyses.split(",") if x.strip())
    if set(only) - set(ANALYSES):
        p.error(f"unknown analyses {sorted(set(only) - set(ANALYSES))}")
    unknown = set(paths) - {"bridge", "bridge-ipc", "parquet", "driver"}
    if unknown:
        p.error(f"unknown paths {sorted(unknown)}")

    rows_per_snapshot = args.brokers * (args.shared_topics + args.auto_topics)
    steps = max(1, -(-args.rows // (rows_per_snapshot * args.namesrvs)))
    batch = min(args.batch, steps)
    faults = fault_schedule(args.brokers, steps, args.period_ms, args.seed)
    print_machine()
    print(f"  spark      {versions()}")
    print(
        f"workload: {args.namesrvs} NameServers x {steps} snapshots x ~{rows_per_snapshot} rows "
        f"(target {args.rows:,}); {len(faults) // 2} broker kills; batches of {batch} snapshots"
    )

    watch = Stopwatch()
    pipeline: dict[str, Any] | None = None
    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    workdir = Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    try:
        with watch.stage("setup", "init_spark + first action"):
            settings = SparkSettings(executor_memory=args.executor_memory, jvm_options=args.jvm_options or "",
                                     extra_configs=INTERPRETED_PLANS if args.interpret else {})
            spark = get_or_create_spark(settings, init_ray=False)
            spark.range(10).count()

        with watch.stage("actors", "generate snapshots (Arrow in object store)"):
            sources = [
                SnapshotSource.remote(i, args.brokers, args.shared_topics, args.auto_topics, faults)
                for i in range(args.namesrvs)
            ]
            refs = []
            for first in range(0, steps, batch):  # calls on one actor run in order: time moves forward
                count = min(batch, steps - first)
                refs.extend(src.snapshots.remote(first, count, args.period_ms) for src in sources)
            ray.wait(refs, num_returns=len(refs), fetch_local=False)
        total_rows = sum(ray.get([src.rows_emitted.remote() for src in sources]))
        print(f"  {total_rows:,} rows in {len(refs)} Arrow tables")

        fault_table = pa.table(
            {
                "fault_id": list(range(1, len(faults) + 1)),
                "t_ms": [t for t, _, _ in faults],
                "kind": [k for _, k, _ in faults],
                "target": [n for _, _, n in faults],
                "broker_addr": [None] * len(faults),
                "detail": [""] * len(faults),
            }
        )
        faults_df = faults_to_spark(spark, fault_table).cache()
        faults_df.count()

        frames: dict[str, Any] = {}
        for rep in range(args.repeat):  # loads alternate paths; the summary keeps each stage's best
            if args.repeat > 1:
                print(f"  load round {rep + 1}/{args.repeat}:")
            for df in frames.values():
                df.unpersist()
            frames = load_all(spark, paths, refs, sources, total_rows, workdir / f"snapshots-{rep}", watch)

        counts: dict[str, dict[str, int]] = {}
        if not args.no_analyses:
            # JIT and whole-stage codegen make every first run slow: warm up on a small slice so
            # the first timed path is not penalised.
            warm = Stopwatch()
            if not args.quick:
                sample = next(iter(frames.values())).limit(5_000).cache()
                sample.count()
                print("  warm-up (not counted):")
                run_analyses(spark, sample, faults_df, "warm-up", warm, only)
                sample.unpersist()
            for path, df in frames.items():
                counts[path] = run_analyses(spark, df, faults_df, path, watch, only)
            if len({tuple(sorted(c.items())) for c in counts.values()}) > 1:
                print("WARNING: result row counts differ between paths:", counts)
        for df in frames.values():
            df.unpersist()
        pipeline = time_pipeline(args.pipeline_duration, workdir) if args.pipeline_duration > 0 else None
    finally:
        stop_spark()
        ray.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)

    print_summary(watch, paths, total_rows, counts)
    if pipeline:
        print(f"\npipeline end to end (chaos {args.pipeline_duration:g} s with snapshots -> namesrv analyze, "
              f"Spark already up): chaos {pipeline['chaos_s']:.1f} s ({pipeline['faults']} faults, "
              f"{pipeline['snapshot_rows']:,} snapshot rows) + analyze {pipeline['analyze_s']:.1f} s "
              f"= {pipeline['chaos_s'] + pipeline['analyze_s']:.1f} s")
    return 0


def time_pipeline(duration_s: float, workdir: Path) -> dict[str, Any]:
    """The issue-14 pipeline on the running Ray and Spark: a seeded chaos run (private deployment,
    route snapshots collected) and `namesrv analyze` of its output directory."""
    from clients.analysis import cli
    from clients.chaos.plan import ChaosConfig
    from clients.chaos.run import run_chaos
    from clients.chaos.schema import FAULT_KINDS

    out = workdir / "chaos"
    started = time.perf_counter()
    report = run_chaos(ChaosConfig(duration_s=duration_s, fault_interval_s=1.8, seed=3, rate=40), out)
    chaos_s = time.perf_counter() - started
    parser = argparse.ArgumentParser(prog="namesrv")
    cli.add_parser(parser.add_subparsers(dest="command"))
    started = time.perf_counter()
    code = cli.run(parser.parse_args(["analyze", str(out), "--no-progress", "--quiet"]))
    analyze_s = time.perf_counter() - started
    if code != 0 or not report.ok:
        print(f"WARNING: pipeline run not clean (analyze exit {code}, invariants ok {report.ok})")
    return {"chaos_s": chaos_s, "analyze_s": analyze_s, "snapshot_rows": report.snapshot_rows,
            "faults": sum(1 for r in report.timeline if r.kind in FAULT_KINDS)}


def print_summary(watch: Stopwatch, paths: list[str], rows: int, counts: dict[str, dict[str, int]]) -> None:
    print(f"\n=== {rows:,} snapshot rows; seconds per stage (load stages: best of their runs) ===")
    for (path, stage), secs in watch.results.items():
        if stage in JOBS:
            continue
        runs = watch.runs[(path, stage)]
        all_runs = f"   runs: {', '.join(f'{r:.2f}' for r in runs)}" if len(runs) > 1 else ""
        print(f"{path:10s} {stage:55s} {secs:8.2f}{all_runs}")
    print()
    load = {p: sum(s for (q, st), s in watch.results.items() if q == p and st not in JOBS) for p in paths}
    base = "parquet" if "parquet" in paths else paths[-1]
    others = [p for p in paths if p != base]
    header = f"{'stage':28s}" + "".join(f"{p:>12s}" for p in paths)
    header += "".join(f"{p + '/' + base:>20s}" for p in others)
    print(header)
    rows_out = [("load total (to cached DF)", load)]
    for name in JOBS:
        rows_out.append((name, {p: watch.results.get((p, name), float("nan")) for p in paths}))
    analyses_total = {p: sum(watch.results.get((p, n), 0.0) for n in JOBS) for p in paths}
    rows_out.append(("analyses total", analyses_total))
    rows_out.append(("end to end", {p: load[p] + analyses_total[p] for p in paths}))
    for label, values in rows_out:
        line = f"{label:28s}" + "".join(f"{values[p]:12.2f}" for p in paths)
        line += "".join(
            f"{values[p] / values[base]:20.2f}" if values[base] else f"{'-':>20s}" for p in others
        )
        print(line)
    if counts:
        first = next(iter(counts.values()))
        print("result rows:", ", ".join(f"{k}={v:,}" for k, v in first.items()))
    for path in paths:
        print(f"{path} load throughput: {rows / load[path]:,.0f} rows/s")


if __name__ == "__main__":
    sys.exit(main())
