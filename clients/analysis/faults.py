"""The chaos suite's fault timeline (optional input): what was broken, when, and which way.

Contract: Parquet (a file or a directory of files) with fault_id:int64, t_ms:int64, kind:string,
target:string (broker or NameServer name), broker_addr:string (nullable), detail:string.
Broker death kinds start a "dead" period for the target broker; revive kinds end it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from clients.analysis.errors import FaultTimelineError
from clients.chaos.schema import FAULT_TIMELINE_COLUMNS, OPTIONAL_TIMELINE_COLUMNS, TIMELINE_KINDS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


def fault_arrow_schema() -> pa.Schema:
    return pa.schema([(name, pa.type_for_alias(t)) for name, t in FAULT_TIMELINE_COLUMNS])


def fault_spark_schema() -> StructType:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType(
        [StructField(name, LongType() if t == "int64" else StringType(), True) for name, t in FAULT_TIMELINE_COLUMNS]
    )


def _with_optional(table: pa.Table) -> pa.Table:
    """The timeline with the columns a run may leave out (OPTIONAL_TIMELINE_COLUMNS) added as nulls."""
    schema = fault_arrow_schema()
    for name in OPTIONAL_TIMELINE_COLUMNS:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows, schema.field(name).type))
    return table


def write_faults(path: str | os.PathLike[str], table: pa.Table) -> None:
    """Write a fault timeline (used by tests and tools; the chaos suite may write its own)."""
    table = _with_optional(table)
    pq.write_table(table.select(fault_arrow_schema().names).cast(fault_arrow_schema()), str(path))


def _files(path: Path) -> list[Path]:
    if not path.exists():
        raise FaultTimelineError(f"fault timeline {path} does not exist")
    if path.is_file():
        return [path]
    files = sorted(
        p for p in path.rglob("*") if p.is_file() and not any(part.startswith((".", "_")) for part in p.parts)
    )
    if not files:
        raise FaultTimelineError(f"fault timeline {path} contains no files")
    return files


def read_faults_arrow(path: str | os.PathLike[str]) -> pa.Table:
    """Read and check a fault timeline; unknown kinds are kept but logged (the analyses ignore them)."""
    expected = fault_arrow_schema()
    tables: list[pa.Table] = []
    for file in _files(Path(path)):
        try:
            table = pq.read_table(file)
        except (pa.ArrowException, OSError) as exc:
            raise FaultTimelineError(f"corrupt fault timeline file {file}: {exc}") from exc
        table = _with_optional(table)
        missing = [n for n in expected.names if n not in table.column_names]
        if missing:
            raise FaultTimelineError(f"fault timeline {file} lacks columns {missing}")
        try:
            tables.append(table.select(expected.names).cast(expected))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise FaultTimelineError(f"fault timeline {file} has wrong column types: {exc}") from exc
    table = pa.concat_tables(tables)
    for col in ("fault_id", "t_ms", "kind", "target"):
        if table.column(col).null_count:
            raise FaultTimelineError(f"fault timeline {path} has null {col!r} values")
    unknown = sorted(set(table.column("kind").to_pylist()) - set(TIMELINE_KINDS))
    if unknown:
        log.warning("fault timeline %s has unknown kinds %s; the analyses ignore them", path, unknown)
    return table


def read_faults_spark(spark: SparkSession, path: str | os.PathLike[str]) -> DataFrame:
    """The fault timeline as a (small) Spark DataFrame, validated with pyarrow first."""
    table = read_faults_arrow(path)
    return faults_to_spark(spark, table)


def faults_to_spark(spark: SparkSession, table: pa.Table) -> DataFrame:
    """Through pandas + Arrow (no Python worker on the executors); the columns have no null ints."""
    pdf = _with_optional(table).select(fault_arrow_schema().names).cast(fault_arrow_schema()).to_pandas()
    return spark.createDataFrame(pdf, schema=fault_spark_schema())
