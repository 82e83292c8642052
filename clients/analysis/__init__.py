"""Spark-on-Ray (RayDP) analysis of NameServer route snapshots.

Modules, one job each (the snapshot dataset itself is `clients.snapshots`): `spark` (one
shared RayDP session with the JDK 17 flags), `jobs` (the DataFrame analyses), `bridge` (Spark <->
Ray Datasets), `report` (run everything, tables, Parquet results, HTML with plots), `cli`
(`namesrv analyze`). Importing this package starts nothing: Ray, Spark and matplotlib load lazily.
"""

