"""`namesrv analyze PATH [--faults PARQUET] [--out DIR]`: the analysis report from the command line.

PATH is a snapshot dataset (what `namesrv snapshot` writes), or a chaos output directory as
`namesrv chaos --out DIR` leaves it: then its snapshots/, faults.parquet and the harness' own records
are found there, every analysis is related to the faults, and the report goes to DIR/analysis.

Inputs are validated with pyarrow before Ray or Spark start, so a wrong path or a corrupt file
fails in a second with one line on stderr (exit 2) instead of a JVM stack trace after 20 s.
A failure inside the analysis itself exits 1 with a one-line reason (details at debug level).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from clients.analysis.errors import INPUT_ERRORS

log = logging.getLogger(__name__)

PROG = "namesrv analyze"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `analyze` on an argparse subparsers object (from `parser.add_subparsers()`)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "analyze",
        help="analyze route snapshots with Spark on Ray, related to a chaos run's faults "
        "(detection, divergence, liveness, stale routes, skew)",
        description="Analyze route snapshots with Spark on Ray and write Parquet results plus a "
        "self-contained report.html. PATH is a snapshot dataset (date=/namesrv= partitions, from "
        "`namesrv snapshot`) or a chaos output directory (`namesrv chaos --out DIR`), whose snapshots "
        "and faults are found and related to each other: one row per fault first.",
    )
    p.add_argument("path", help="snapshot dataset directory, or a chaos output directory")
    p.add_argument("--faults", metavar="PARQUET",
                   help="chaos fault timeline (file or directory; found by itself in a chaos output directory)")
    p.add_argument(
        "--out", metavar="DIR", default=None,
        help="output directory (default: PATH/analysis for a chaos output directory, else analysis-report)",
    )
    p.add_argument(
        "--bucket-ms", type=int, default=None,
        help="alignment bucket for divergence (default: a tenth of a chaos run's snapshot interval, else 10000)",
    )
    p.add_argument(
        "--carry-ms",
        type=int,
        default=None,
        help="as-of tolerance: how far a snapshot is carried (default: a chaos run's snapshot interval, "
        "else one bucket)",
    )
    p.add_argument(
        "--include-system-topics",
        action="store_true",
        help="include TBW102, %%RETRY%% ... in the skew analysis",
    )
    p.add_argument("--executors", type=int, default=1, help="Spark executors (default: %(default)s)")
    p.add_argument("--executor-cores", type=int, default=1, help="cores per executor (default: %(default)s)")
    p.add_argument("--executor-memory", default="1G", help="memory per executor (default: %(default)s)")
    p.add_argument(
        "--ray-address", default=None, help="join this Ray cluster instead of starting a local one"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--quiet", action="store_true", help="do not print the result tables")
    p.set_defaults(func=run)
    return p


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def run(args: argparse.Namespace) -> int:
    """Validate inputs, start Ray + Spark, run the report, stop Spark then Ray. Returns the exit code."""
    from clients.analysis.faults import read_faults_arrow
    from clients.analysis.inputs import resolve_inputs
    from clients.snapshots.dataset import validate_dataset

    try:
        inputs = resolve_inputs(args.path, args.faults)
        info = validate_dataset(inputs.snapshots, deep=True)
        if inputs.faults is not None:
            read_faults_arrow(inputs.faults)
    except INPUT_ERRORS as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    from clients.analysis.jobs import DEFAULT_BUCKET_MS

    run_info = inputs.run
    out = args.out or (str(run_info.root / "analysis") if run_info is not None else "analysis-report")
    bucket_ms = args.bucket_ms or (run_info.bucket_ms if run_info is not None else None) or DEFAULT_BUCKET_MS
    carry_ms = args.carry_ms if args.carry_ms is not None else (run_info.carry_ms if run_info is not None else None)

    import ray

    from clients.analysis.faults import read_faults_spark
    from clients.analysis.report import ReportOptions, run_report
    from clients.analysis.spark import SparkSettings, active_spark, get_or_create_spark, stop_spark
    from clients.snapshots.dataset import read_snapshots_spark

    started_ray = False
    owns_spark = active_spark() is None  # embedded in a process that already runs Spark: leave it be
    try:
        if not ray.is_initialized():
            if args.ray_address:
                ray.init(address=args.ray_address, log_to_driver=False)
            else:
                ray.init(
                    address="local",
                    num_cpus=os.cpu_count() or 2,
                    include_dashboard=False,
                    log_to_driver=False,
                )
            started_ray = True
        settings = SparkSettings(
            num_executors=args.executors,
            executor_cores=args.executor_cores,
            executor_memory=args.executor_memory,
        )
        spark = get_or_create_spark(settings, init_ray=False)
        snapshots = read_snapshots_spark(spark, inputs.snapshots, validate=False)
        faults = read_faults_spark(spark, inputs.faults) if inputs.faults is not None else None
        options = ReportOptions(
            bucket_ms=bucket_ms, carry_ms=carry_ms, include_system_topics=args.include_system_topics
        )
        what = f" of {run_info.describe()}" if run_info is not None else ""
        print(f"analyzing {info.num_rows:,} snapshot rows in {len(info.files)} files{what}", file=sys.stderr)
        failovers = None
        if run_info is not None:
            from clients.analysis.failover import failover_report

            failovers = failover_report(spark, run_info.root, snapshots, faults, out)
        run_report(
            spark,
            snapshots,
            faults,
            out,
            options=options,
            progress=not args.no_progress,
            print_tables=not args.quiet,
            run=run_info,
            failovers=failovers,
        )
        if failovers is not None:
            print(failovers.line)
    except INPUT_ERRORS as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    except Exception as exc:  # a Spark/JVM failure: one line for the user, the rest for the log
        log.debug("analysis failed", exc_info=True)
        _error(f"analysis failed: {_one_line(exc)}")
        return EXIT_FAILED
    finally:
        if owns_spark:
            stop_spark(shutdown_ray=False)
        if started_ray and ray.is_initialized():
            ray.shutdown()
    print(f"report: {os.path.join(out, 'report.html')}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m clients.analysis.cli analyze ...`) until the main CLI wires it in."""
    parser = argparse.ArgumentParser(prog="namesrv")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
