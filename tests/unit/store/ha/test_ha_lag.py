"""ReplicationLag (namesrv.store.ha.lag) with an injected clock: each written batch is timed until a
slave's acknowledgement covers it; first acknowledgements only set a baseline; old ends are dropped."""

from __future__ import annotations

from namesrv.store.ha.lag import ReplicationLag


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_batch_is_timed_from_its_write_to_the_acknowledgement_that_covers_it() -> None:
    clock = Clock()
    lag = ReplicationLag(clock)
    lag.acked(1, 0)  # the slave's first request: where it stands, nothing timed
    lag.written(100)
    clock.now += 0.002
    lag.written(250)
    clock.now += 0.003
    lag.acked(1, 100)  # covers the first batch only: 5 ms
    clock.now += 0.010
    lag.acked(1, 100)  # nothing new
    lag.acked(1, 250)  # the second: 13 ms after its write
    s = lag.summary()[1]
    assert s["n"] == 2 and s["max"] is not None and abs(s["max"] - 13.0) < 1e-6
    assert s["p50"] is not None and abs(s["p50"] - 5.0) < 1e-6


def test_a_first_or_renewed_acknowledgement_times_nothing_and_old_ends_are_forgotten() -> None:
    clock = Clock()
    lag = ReplicationLag(clock, keep_s=1.0)
    lag.written(100)
    assert lag._ends == [], "no slave yet: nothing could time it, nothing is kept"
    clock.now += 5
    lag.acked(2, 100)  # first: its history before it asked is not its lag
    assert lag.summary() == {}
    lag.written(200)
    lag.forget(2)  # gone (its actor died); it comes back from 150
    lag.acked(2, 150)
    clock.now += 0.001
    lag.written(300)
    clock.now += 2  # older than keep_s when it is acknowledged: 200 and 300 are dropped at the next write
    lag.written(400)
    clock.now += 0.004
    lag.acked(2, 400)
    assert lag.summary()[2]["n"] == 1 and abs((lag.summary()[2]["max"] or 0) - 4.0) < 1e-6
    lag.written(350)  # not past the end: ignored
    assert lag._ends[lag._first:] == [400]


def test_the_window_keeps_the_latest_samples_and_the_ends_stay_bounded() -> None:
    clock = Clock()
    lag = ReplicationLag(clock, window=10, max_pending=50)
    lag.acked(1, 0)
    for i in range(1, 5001):
        lag.written(i)
        clock.now += 0.001
        if i % 3 == 0:
            lag.acked(1, i)
    assert lag.summary()[1]["n"] == 10
    assert len(lag._ends) - lag._first <= 50 and len(lag._ends) <= 2 * 1024 + 50
