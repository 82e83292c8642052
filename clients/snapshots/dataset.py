"""The route-snapshot dataset on disk: append-only Parquet, Hive-partitioned by date and NameServer.

Layout: ``ROOT/date=YYYY-MM-DD/namesrv=<url-quoted name>/part-<first snapshot_ms>-<uuid>.parquet``.
Partitioning by NameServer lets each NameServer (or its collector) append without coordination,
and a reader prunes by day. Files are written under a hidden temporary name and renamed, so a
concurrent reader (Spark and pyarrow both skip names starting with '.' or '_') never sees half a
file. The partition columns are not stored inside the files (Hive convention); readers get them
back from the path, with an explicit schema so a NameServer named '1' stays a string.

Every reader validates first and raises `SnapshotDatasetError` with a one-line reason, because a
corrupt footer otherwise surfaces as a JVM stack trace halfway through a Spark job.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from clients.snapshots import SnapshotDatasetError
from namesrv.common.persist import fsync_dir
from namesrv.routeinfo.snapshot import SNAPSHOT_COLUMNS, arrow_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

PARTITION_COLUMNS: tuple[str, ...] = ("date", "namesrv")
"""Directory levels, outermost first; `date` is the UTC day of `snapshot_ms`."""


def file_schema() -> pa.Schema:
    """Columns stored inside each file: the snapshot schema minus the partition columns."""
    full = arrow_schema()
    return pa.schema([f for f in full if f.name not in PARTITION_COLUMNS])


def dataset_arrow_schema() -> pa.Schema:
    """What a reader sees: every snapshot column plus `date` (string)."""
    return arrow_schema().append(pa.field("date", pa.string()))


def dataset_spark_schema() -> StructType:
    """`dataset_arrow_schema` as a Spark schema (explicit, so nothing is inferred from paths)."""
    from pyspark.sql.types import (
        BooleanType,
        DataType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    types: dict[str, DataType] = {
        "int64": LongType(),
        "int32": IntegerType(),
        "string": StringType(),
        "bool": BooleanType(),
    }
    fields = [StructField(name, types[t], True) for name, t in SNAPSHOT_COLUMNS]
    fields.append(StructField("date", StringType(), True))
    return StructType(fields)


# ---------------------------------------------------------------------------------------- writing
def _as_table(data: pa.RecordBatch | pa.Table | Iterable[pa.RecordBatch | pa.Table]) -> pa.Table:
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return data
    parts = [pa.Table.from_batches([d]) if isinstance(d, pa.RecordBatch) else d for d in data]
    if not parts:
        return arrow_schema().empty_table()
    return pa.concat_tables([_conform(p) for p in parts])


def _conform(table: pa.Table) -> pa.Table:
    """Cast to the snapshot schema; refuse missing columns rather than writing an unreadable file."""
    expected = arrow_schema()
    missing = [n for n in expected.names if n not in table.column_names]
    if missing:
        raise SnapshotDatasetError(f"snapshot batch lacks columns {missing}")
    try:
        return table.select(expected.names).cast(expected)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SnapshotDatasetError(f"snapshot batch has incompatible column types: {exc}") from exc


def append_snapshots(
    root: str | os.PathLike[str], data: pa.RecordBatch | pa.Table | Iterable[pa.RecordBatch | pa.Table]
) -> list[Path]:
    """Append snapshot rows as new files (one per date x NameServer present); returns their paths.

    Never rewrites an existing file, so many writers may append to the same root at once.
    """
    table = _conform(_as_table(data))
    if table.num_rows == 0:
        return []
    for col in ("snapshot_ms", "namesrv"):
        if table.column(col).null_count:
            raise SnapshotDatasetError(f"snapshot rows with a null {col!r} cannot be partitioned")
    dates = pc.strftime(pc.cast(table.column("snapshot_ms"), pa.timestamp("ms", tz="UTC")), format="%Y-%m-%d")
    table = table.append_column("date", dates)
    keys = table.group_by(["date", "namesrv"]).aggregate([]).to_pylist()
    root_path = Path(root)
    written: list[Path] = []
    for key in keys:
        part = table
        if len(keys) > 1:
            mask = pc.and_(pc.equal(table["date"], key["date"]), pc.equal(table["namesrv"], key["namesrv"]))
            part = table.filter(mask)
        part = part.drop_columns(list(PARTITION_COLUMNS))
        directory = root_path / f"date={key['date']}" / f"namesrv={quote(key['namesrv'], safe='')}"
        directory.mkdir(parents=True, exist_ok=True)
        first_ms = pc.min(part["snapshot_ms"]).as_py()
        name = f"part-{first_ms}-{uuid.uuid4().hex}.parquet"
        tmp = directory / f".{name}.tmp"
        pq.write_table(part, tmp, compression="zstd")
        with open(tmp, "rb") as f:  # durable before it becomes visible: write, fsync, rename
            os.fsync(f.fileno())
        os.replace(tmp, directory / name)
        fsync_dir(directory)
        written.append(directory / name)
    log.debug("appended %d snapshot rows in %d files under %s", table.num_rows, len(written), root_path)
    return written


# ---------------------------------------------------------------------------------------- validation
@dataclass(frozen=True, slots=True)
class DatasetInfo:
    root: Path
    files: tuple[Path, ...]
    num_rows: int


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def list_data_files(root: str | os.PathLike[str]) -> list[Path]:
    """Every data file a Spark reader would pick up, refusing anything that breaks the layout."""
    root_path = Path(root)
    if not root_path.exists():
        raise SnapshotDatasetError(f"snapshot dataset {root_path} does not exist")
    if root_path.is_file():
        raise SnapshotDatasetError(
            f"snapshot dataset {root_path} is a file; expected a directory laid out as "
            "date=YYYY-MM-DD/namesrv=NAME/*.parquet"
        )
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root_path):
        dirnames[:] = sorted(d for d in dirnames if not _hidden(d))
        for fname in sorted(filenames):
            if _hidden(fname):
                continue
            path = Path(dirpath) / fname
            rel = path.relative_to(root_path).parts
            layout_ok = (
                len(rel) == 3
                and rel[0].startswith("date=")
                and rel[1].startswith("namesrv=")
                and fname.endswith(".parquet")
            )
            if not layout_ok:
                raise SnapshotDatasetError(
                    f"unexpected file {path} in snapshot dataset {root_path}; expected "
                    "date=YYYY-MM-DD/namesrv=NAME/*.parquet"
                )
            files.append(path)
    return files


def validate_dataset(root: str | os.PathLike[str], *, deep: bool = False) -> DatasetInfo:
    """Check layout, footers and schema of every file (and with `deep`, decode every page too)."""
    root_path = Path(root)
    files = list_data_files(root_path)
    if not files:
        raise SnapshotDatasetError(f"snapshot dataset {root_path} is empty (no Parquet files)")
    expected = file_schema()
    rows = 0
    for path in files:
        try:
            meta = pq.read_metadata(path)
            schema = meta.schema.to_arrow_schema()
        except (pa.ArrowException, OSError) as exc:
            raise SnapshotDatasetError(f"corrupt Parquet file {path}: {exc}") from exc
        for field in expected:
            idx = schema.get_field_index(field.name)
            if idx < 0:
                raise SnapshotDatasetError(f"{path} lacks snapshot column {field.name!r} (wrong schema)")
            if schema.field(idx).type != field.type:
                raise SnapshotDatasetError(
                    f"{path}: column {field.name!r} is {schema.field(idx).type}, expected {field.type}"
                )
        if deep:
            try:
                pq.read_table(path, columns=expected.names)
            except (pa.ArrowException, OSError) as exc:
                raise SnapshotDatasetError(f"corrupt Parquet file {path}: {exc}") from exc
        rows += meta.num_rows
    if rows == 0:
        raise SnapshotDatasetError(f"snapshot dataset {root_path} has files but no rows")
    return DatasetInfo(root_path, tuple(files), rows)


# ---------------------------------------------------------------------------------------- reading
def read_snapshots_arrow(root: str | os.PathLike[str], *, validate: bool = True) -> pa.Table:
    """The whole dataset as one Arrow table (all snapshot columns + `date`)."""
    if validate:
        validate_dataset(root)
    partitioning = pads.partitioning(
        pa.schema([("date", pa.string()), ("namesrv", pa.string())]), flavor="hive"
    )
    dataset = pads.dataset(
        str(root), format="parquet", partitioning=partitioning, schema=dataset_arrow_schema()
    )
    try:
        return dataset.to_table()
    except (pa.ArrowException, OSError) as exc:
        raise SnapshotDatasetError(f"cannot read snapshot dataset {root}: {exc}") from exc


def read_snapshots_spark(
    spark: SparkSession, root: str | os.PathLike[str], *, validate: bool = True
) -> DataFrame:
    """The dataset as a Spark DataFrame, read in parallel by the executors (the fast path)."""
    if validate:
        validate_dataset(root)
    return spark.read.schema(dataset_spark_schema()).parquet(str(Path(root).resolve()))
