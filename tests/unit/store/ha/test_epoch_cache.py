"""The broker's epoch file: atomic persistence, ordering rules, and the consistent point a returning
replica truncates to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from namesrv.store.ha.epoch_cache import NO_END, EpochCacheError, EpochEntry, EpochFileCache, find_consistent_point


def cache(*pairs: tuple[int, int]) -> EpochFileCache:
    return EpochFileCache(None, pairs)


def point(local: EpochFileCache, local_max: int, master: EpochFileCache, master_max: int) -> int | None:
    return find_consistent_point(local.entries(local_max), master.entries(master_max))


def test_entries_end_where_the_next_starts_and_the_last_at_the_max_offset() -> None:
    c = cache((1, 0), (2, 100), (4, 250))
    assert c.entries(300) == [EpochEntry(1, 0, 100), EpochEntry(2, 100, 250), EpochEntry(4, 250, 300)]
    assert c.entries()[-1].end_offset == NO_END
    assert c.find_entry_by_offset(120, 300) == EpochEntry(2, 100, 250)
    assert c.find_entry_by_offset(300, 300) is None
    assert c.last_epoch() == 4 and cache().last_epoch() == -1


def test_persisted_atomically_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "store" / "epochFileCheckpoint"
    c = EpochFileCache.load(path)
    assert len(c) == 0
    c.append_entry(1, 0)
    c.append_entry(2, 100)
    assert EpochFileCache.load(path).entries(150) == c.entries(150)
    assert sorted(os.listdir(path.parent)) == ["epochFileCheckpoint"]  # no temp file left
    path.write_text("{broken")
    with pytest.raises(EpochCacheError):
        EpochFileCache.load(path)


def test_a_failed_write_leaves_the_cache_unchanged(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    c = EpochFileCache(blocker / "epoch", [(1, 0)])  # its directory cannot be created
    with pytest.raises(OSError):
        c.append_entry(2, 50)
    assert c.entries(60) == [EpochEntry(1, 0, 60)]


def test_append_rules() -> None:
    c = cache((1, 0), (2, 100))
    with pytest.raises(EpochCacheError):
        c.append_entry(3, 50)  # a term cannot start before the previous one
    c.append_entry(3, 100)  # term 2 wrote nothing: replaced by term 3
    assert [(e.epoch, e.start_offset) for e in c.entries()] == [(1, 0), (3, 100)]
    c.append_entry(2, 100)  # an older epoch re-elected: newer entries dropped first (changeToMaster)
    assert [(e.epoch, e.start_offset) for e in c.entries()] == [(1, 0), (2, 100)]
    with pytest.raises(EpochCacheError):
        cache((2, 0), (1, 10))


def test_truncation() -> None:
    c = cache((1, 0), (2, 100), (3, 200))
    c.truncate_suffix_by_offset(150)
    assert [(e.epoch, e.start_offset) for e in c.entries()] == [(1, 0), (2, 100)]
    c.truncate_prefix_by_offset(100, 180)
    assert [(e.epoch, e.start_offset) for e in c.entries()] == [(2, 100)]
    c.truncate_suffix_by_epoch(2)
    assert len(c) == 0


def test_consistent_point_old_master_diverged_in_its_last_epoch() -> None:
    # old master wrote [0, 150) in epoch 1, only [0, 100) reached the slave, which became master
    # in epoch 2 at 100 and wrote up to 180: the old master keeps [0, 100) and drops the rest
    old = cache((1, 0))
    new = cache((1, 0), (2, 100))
    assert point(old, 150, new, 180) == 100


def test_consistent_point_equal_caches_is_the_shorter_log() -> None:
    a = cache((1, 0), (2, 100))
    assert point(a, 180, cache((1, 0), (2, 100)), 180) == 180
    assert point(a, 150, cache((1, 0), (2, 100)), 180) == 150  # a slave behind keeps all it has


def test_consistent_point_empty_local_cache_copies_from_zero() -> None:
    assert point(cache(), 0, cache((1, 0)), 500) == 0


def test_consistent_point_across_gaps_in_epoch_numbers() -> None:
    # epochs 2 and 3 were terms the other side never saw (a master that wrote nothing, elections it missed)
    local = cache((1, 0), (2, 100), (4, 300))
    master = cache((1, 0), (3, 100), (5, 250))
    assert point(local, 350, master, 400) == 100


def test_consistent_point_same_epoch_different_start_is_not_common() -> None:
    local = cache((1, 0), (3, 120))
    master = cache((1, 0), (3, 100))
    assert point(local, 200, master, 300) == 100


def test_no_common_epoch() -> None:
    # the master no longer holds the start of its log: nothing to reconcile with
    assert point(cache((5, 1000)), 1200, cache((3, 500), (4, 600)), 700) is None
    # both logs start at 0 but in different terms (an unclean election): they differ from byte 0
    assert point(cache((1, 0)), 150, cache((2, 0)), 300) == 0


def test_wire_body_is_rocketmq_epoch_entry_cache() -> None:
    body = cache((1, 0), (2, 100)).to_wire("DefaultCluster", "broker-a", 1, 180)
    assert body == {
        "brokerId": 1, "brokerName": "broker-a", "clusterName": "DefaultCluster", "maxOffset": 180,
        "epochList": [{"endOffset": 100, "epoch": 1, "startOffset": 0},
                      {"endOffset": 180, "epoch": 2, "startOffset": 100}],
    }


# ---------------------------------------------------------------------------- random histories
def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def copy_from(master_log: list[int], master: EpochFileCache, cp: int, n: int, log: list[int],
              own: EpochFileCache) -> None:
    """A slave copies n bytes after cp; each byte of a new epoch starts an entry at that epoch's
    start offset on the master (the HA transfer header carries both)."""
    for offset in range(cp, cp + n):
        entry = master.find_entry_by_offset(offset, len(master_log))
        assert entry is not None
        if own.last_epoch() != entry.epoch:
            own.append_entry(entry.epoch, entry.start_offset)
        log.append(master_log[offset])


terms = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5),
                           st.lists(st.integers(0, 8), min_size=3, max_size=3)), max_size=12)


@settings(max_examples=400, deadline=None)
@given(terms)
def test_consistent_point_is_exactly_where_two_replicas_logs_part(history: list[tuple[int, int, list[int]]]) -> None:
    """Three replicas; each term a master (any replica: clean or not) starts an epoch entry and
    writes some bytes, then every other replica truncates to its consistent point with the master
    and copies some of the rest. The consistent point is always where their logs part."""
    logs: list[list[int]] = [[], [], []]
    caches = [EpochFileCache() for _ in range(3)]
    for epoch, (master, written, copied) in enumerate(history, start=1):
        caches[master].append_entry(epoch, len(logs[master]))
        logs[master] += [epoch] * written
        for replica in range(3):
            if replica == master:
                continue
            local, theirs = logs[replica], logs[master]
            cp = find_consistent_point(caches[replica].entries(len(local)), caches[master].entries(len(theirs)))
            assert cp == common_prefix(local, theirs), (local, theirs, caches[replica].entries())
            del local[cp:]
            caches[replica].truncate_suffix_by_offset(cp)
            copy_from(theirs, caches[master], cp, min(copied[replica], len(theirs) - cp), local, caches[replica])
            assert local == theirs[: len(local)]
