"""Errors for bad analysis inputs: the CLI turns these into a one-line message and a non-zero exit."""

from __future__ import annotations


class AnalysisInputError(Exception):
    """An input the analysis cannot use (missing, empty, corrupt, wrong schema)."""


class SnapshotDatasetError(AnalysisInputError):
    """The route-snapshot Parquet dataset is missing, empty, corrupt or has the wrong schema."""


class FaultTimelineError(AnalysisInputError):
    """The chaos fault timeline Parquet is missing, corrupt or has the wrong schema."""
