"""A log kept as fixed-size segment files named by their start offset (RocketMQ's MappedFileQueue),
shared by the commit log and the consume queues.

Positions are global: segment `00000000001073741824` holds the bytes [1073741824, 1073741824 +
segment size). Writes go at the end only (`write`, or `overwrite` of bytes already there: recovery
re-dispatching), split at segment boundaries; a new segment's name is made durable (its directory
fsynced) as soon as it is created. Segments are deleted from the head (retention) or the tail
(`truncate`).

Where we differ from RocketMQ 5.3: files are written with pwrite and read with pread, not memory
mapped, and are not preallocated: a segment grows as it is written, up to the segment size (a full
segment's last record is the commit log's BLANK padding, so it is exactly the segment size on disk).

Thread safety: the owner serialises writers (its write lock). A reader takes a reference to a
`Segment` (from `segments`, a list replaced, never mutated in place) and preads it; a segment
dropped by retention or truncation closes its file only once no reader holds it any more.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from pathlib import Path

from namesrv.common.persist import fsync_dir

log = logging.getLogger(__name__)

NAME_DIGITS = 20


def segment_name(base: int) -> str:
    return f"{base:0{NAME_DIGITS}d}"


_OPENING = threading.Lock()
_CLOSED = -2


class Segment:
    """One segment file: its start offset, path and descriptor. The descriptor is opened on first
    use (a store with thousands of queues does not hold a descriptor for every old consume-queue
    file) and closed when the last reference goes, or by `close` (then `fd` is negative)."""

    __slots__ = ("_fd", "base", "path")

    def __init__(self, base: int, path: Path, create: bool = False) -> None:
        self.base = base
        self.path = path
        self._fd = -1
        if create:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)

    @property
    def fd(self) -> int:
        if self._fd == -1:
            with _OPENING:
                if self._fd == -1:
                    self._fd = os.open(self.path, os.O_RDWR)
        return self._fd

    def size(self) -> int:
        return os.fstat(self._fd).st_size if self._fd >= 0 else os.stat(self.path).st_size

    def close(self) -> None:
        with _OPENING:
            fd, self._fd = self._fd, _CLOSED
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        fd, self._fd = self._fd, _CLOSED
        if fd >= 0:
            os.close(fd)


class MappedFileQueue:
    def __init__(self, directory: Path, segment_size: int, durable_names: bool = True) -> None:
        """`durable_names` False: a new segment's directory entry is not fsynced at once but listed
        in `unsynced_dirs` for the owner's next flush (the consume queues, covered by the checkpoint)."""
        if segment_size <= 0:
            raise ValueError(f"segment size must be positive, not {segment_size}")
        self.dir = directory
        self.segment_size = segment_size
        self.segments: list[Segment] = []
        """In base order; replaced (never changed in place) so a reader's copy stays valid."""
        self._bases: list[int] = []
        self.durable_names = durable_names
        self.unsynced_dirs: set[Path] = set()
        try:  # one directory read (a store restarts with thousands of consume queues)
            with os.scandir(directory) as entries:
                found = [e.name for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            found = []
        for name in found:
            if name.endswith(".deleting"):  # retention was stopped part-way through deleting it
                (directory / name).unlink(missing_ok=True)
        names = sorted(n for n in found if len(n) == NAME_DIGITS and n.isdigit())
        self.segments = [Segment(int(n), directory / n) for n in names]
        self._bases = [s.base for s in self.segments]

    # ------------------------------------------------------------------ positions
    def file_end(self) -> int:
        """Where the bytes on disk end (the last segment's base plus its size); 0 when empty."""
        if not self.segments:
            return 0
        last = self.segments[-1]
        return last.base + last.size()

    def min_offset(self) -> int:
        """The first position still kept (the first segment's base)."""
        return self.segments[0].base if self.segments else 0

    def room_at(self, pos: int) -> int:
        """Bytes a write at the end position `pos` can put in the segment it lands in (a new
        segment starts at `pos` when the last one is full)."""
        segs = self.segments
        if segs and segs[-1].base <= pos < segs[-1].base + self.segment_size:
            return segs[-1].base + self.segment_size - pos
        return self.segment_size

    def find(self, pos: int) -> Segment | None:
        """The segment holding position `pos`, if any (None below the first or past the last)."""
        segs, bases = self.segments, self._bases
        i = bisect.bisect_right(bases, pos) - 1
        if i < 0 or i >= len(segs):
            return None
        seg = segs[i]
        return seg if pos < seg.base + self.segment_size else None

    def pread(self, pos: int, n: int) -> bytes:
        """Up to `n` bytes from `pos`, across segments; shorter where the data ends or a segment
        is missing."""
        parts: list[bytes] = []
        while n > 0:
            seg = self.find(pos)
            if seg is None:
                break
            try:
                chunk = os.pread(seg.fd, min(n, seg.base + self.segment_size - pos), pos - seg.base)
            except FileNotFoundError:  # deleted (retention) before it was first opened
                break
            if not chunk:
                break
            parts.append(chunk)
            pos += len(chunk)
            n -= len(chunk)
            if pos < seg.base + self.segment_size and n > 0:  # short inside a segment: its data ends there
                break
        return b"".join(parts)

    # ------------------------------------------------------------------ writes (owner's write lock held)
    def write(self, pos: int, data: bytes) -> list[Segment]:
        """Write `data` at `pos`, the end of the data, splitting it at segment boundaries and
        creating segments as needed; returns the segments written (to fsync). On an error nothing
        of it stays: the segments are cut back and those created are removed."""
        touched: list[tuple[Segment, int, bool]] = []
        view, at = memoryview(data), 0
        try:
            while at < len(data):
                room = self.room_at(pos + at)
                segs = self.segments
                created = not (segs and segs[-1].base <= pos + at < segs[-1].base + self.segment_size)
                seg = self._create(pos + at) if created else segs[-1]
                touched.append((seg, pos + at - seg.base, created))
                chunk = view[at : at + room]
                written = os.pwrite(seg.fd, chunk, pos + at - seg.base)
                if written != len(chunk):
                    raise OSError(f"short write to {seg.path}: {written} of {len(chunk)} bytes")
                at += written
        except OSError:
            for seg, local, created in reversed(touched):
                if created:
                    self._drop_tail_segment(seg)
                else:
                    os.ftruncate(seg.fd, local)
            raise
        return [seg for seg, _, _ in touched]

    def overwrite(self, pos: int, data: bytes) -> list[Segment]:
        """Write `data` at `pos` over bytes already there, extending the data if it runs past the
        end (recovery writing again what it re-dispatches)."""
        end = self.file_end()
        if pos >= end:
            return self.write(pos, data) if pos == end else []
        seg = self.find(pos)
        if seg is None or pos + len(data) > seg.base + self.segment_size:
            raise OSError(f"cannot overwrite {len(data)} bytes at {pos} in {self.dir}")
        os.pwrite(seg.fd, data, pos - seg.base)
        return [seg]

    def _create(self, base: int) -> Segment:
        made: list[Path] = []
        p = self.dir
        while not p.is_dir():
            made.append(p)
            p = p.parent
        self.dir.mkdir(parents=True, exist_ok=True)
        seg = Segment(base, self.dir / segment_name(base), create=True)
        dirs = [self.dir, *(m.parent for m in made)]
        if self.durable_names:  # the new segment's name is durable before anything is acknowledged in it
            for d in dirs:
                fsync_dir(d)
        else:
            self.unsynced_dirs.update(dirs)
        self.segments = [*self.segments, seg]
        self._bases = [*self._bases, base]
        return seg

    def _drop_tail_segment(self, seg: Segment) -> None:
        self.segments = [s for s in self.segments if s is not seg]
        self._bases = [s.base for s in self.segments]
        seg.path.unlink(missing_ok=True)
        fsync_dir(self.dir)

    def truncate(self, offset: int) -> int:
        """Cut everything at and after `offset`: later segments are deleted, the one holding it is
        cut and fsynced. Returns the bytes removed."""
        removed = 0
        keep = [s for s in self.segments if s.base < offset]
        for seg in self.segments[len(keep):]:
            removed += seg.size()
            seg.path.unlink(missing_ok=True)
        if len(keep) != len(self.segments):
            self.segments, self._bases = keep, [s.base for s in keep]
            fsync_dir(self.dir)
        if keep:
            last = keep[-1]
            size = last.size()
            if size > offset - last.base:
                removed += size - (offset - last.base)
                os.ftruncate(last.fd, offset - last.base)
                os.fsync(last.fd)
        return removed

    def forget_first(self) -> Segment | None:
        """Take the oldest segment out of the table (retention), without touching its file: the
        caller unlinks it (outside its locks); it closes once no reader holds it."""
        if not self.segments:
            return None
        seg = self.segments[0]
        self.segments, self._bases = self.segments[1:], self._bases[1:]
        return seg

    def delete_first(self) -> Segment | None:
        """Take the oldest segment out of the table and unlink it."""
        seg = self.forget_first()
        if seg is not None:
            seg.path.unlink(missing_ok=True)
            fsync_dir(self.dir)
        return seg

    def close(self) -> None:
        for seg in self.segments:
            seg.close()


def segment_paths(directory: Path) -> list[Path]:
    """The segment files of `directory`, in order (tools and tests read a log's bytes with it)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.isdigit() and len(p.name) == NAME_DIGITS)
