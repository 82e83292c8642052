"""Errors for bad analysis inputs: the CLI turns these into a one-line message and a non-zero exit."""

from __future__ import annotations

from clients.snapshots import SnapshotDatasetError as SnapshotDatasetError


class AnalysisInputError(Exception):
    """An input the analysis cannot use (missing, empty, corrupt, wrong schema)."""


INPUT_ERRORS: tuple[type[Exception], ...] = (AnalysisInputError, SnapshotDatasetError)
"""What the CLI reports as a bad input (the snapshot dataset's own error included)."""


class FaultTimelineError(AnalysisInputError):
    """The chaos fault timeline Parquet is missing, corrupt or has the wrong schema."""
