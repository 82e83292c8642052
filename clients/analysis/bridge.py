"""Moving data between Spark DataFrames and Ray Datasets (both directions), the Arrow way.

Two ways in, one way out. Ray -> Spark: `Dataset.to_spark` over Arrow tables (RayDP: executors
start Python workers, hence PYSPARK_PYTHON in `clients.analysis.spark`), or Arrow IPC bytes read
by the executor JVMs directly (`arrow_ipc_refs_to_spark`, no Python worker, no pandas).

Spark -> Ray: `ray.data.from_spark` (RayDP's recoverable path: blocks are fetched from the Spark
executors by Ray tasks, so they are only readable while Spark runs). `to_ray_dataset` therefore
materializes by default, after which the blocks live in Ray's object store and survive
`stop_spark`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data
    from pyspark.sql import DataFrame, SparkSession
    from ray import ObjectRef

log = logging.getLogger(__name__)


def to_ray_dataset(df: DataFrame, *, materialize: bool = True) -> ray.data.Dataset:
    """A Spark result as a Ray Dataset; materialized unless told otherwise (see module doc)."""
    import ray.data

    ds = ray.data.from_spark(df)
    if materialize:
        ds = ds.materialize()
        try:
            from raydp.spark.dataset import release_spark_recoverable
        except ImportError:  # older RayDP: nothing pinned
            return ds
        release_spark_recoverable(df)
    return ds


def ray_to_spark(spark: SparkSession, ds: ray.data.Dataset) -> DataFrame:
    """A Ray Dataset of Arrow blocks as a Spark DataFrame (RayDP reads the blocks in the executors)."""
    return ds.to_spark(spark)


def table_to_arrow_ipc(table: pa.Table) -> bytes:
    """One Arrow IPC stream: the block format RayDP's executors read straight from the object store."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def arrow_ipc_refs_to_spark(
    spark: SparkSession, schema: pa.Schema, refs: Sequence[ObjectRef[bytes]]
) -> DataFrame:
    """Arrow IPC byte blocks in the object store -> Spark, read by the executor JVMs themselves.

    The fast bridge: unlike `Dataset.to_spark` over Arrow tables (each executor starts Python
    workers that connect to Ray and go through pandas), the JVM decodes the IPC bytes directly.
    """
    from raydp.spark import ray_dataset_to_spark_dataframe

    return ray_dataset_to_spark_dataframe(spark, schema, list(refs))
