"""The route-snapshot dataset: `dataset` (the Parquet layout: write, validate, read) and `collect`
(drain every NameServer's snapshots into it; `namesrv snapshot`). Both the chaos harness (which
collects during a run) and the analysis (which reads) use it; it uses neither, so imports go one
way: analysis -> chaos -> snapshots."""


class SnapshotDatasetError(Exception):
    """The route-snapshot Parquet dataset is missing, empty, corrupt or has the wrong schema."""
