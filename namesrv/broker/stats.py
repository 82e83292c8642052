"""What GET_BROKER_RUNTIME_INFO reports (RocketMQ's BrokerStats and StoreStatsService, the parts a
broker here has): message totals with their day marks, put and transferred TPS over 10 s, 1 min and
10 min, the commit log's offsets, its oldest message and the disk it is on.

mqadmin clusterList reads `brokerVersionDesc`, `putTps`, `getTransferredTps`, the thread-pool queue
figures, `earliestMessageTimeStamp` and `commitLogDiskRatio`; `clusterList -m` the day marks. A
broker here has no request thread pools: requests run on its event loop as they arrive, so the
"queue" figures report what waits there instead (sends waiting for their flush, pulls held for new
messages) and head wait times of 0. The timer figures come from the schedule service's timers
(namesrv.broker.schedule.service, `TimerFigures`): how many seconds its reading is behind the
earliest due timer, timers parked but not read yet, timers read and waiting, and timers parked and
delivered a second over the last 10 s; a broker without them reports RocketMQ's zeros.
"""

from __future__ import annotations

import collections
import datetime
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from namesrv.common.clock import Clock
from namesrv.remoting.wire_command import CURRENT_VERSION, CURRENT_VERSION_DESC
from namesrv.store.retention import used_ratio

TPS_WINDOWS_S = (10, 60, 600)
"""The windows RocketMQ prints TPS over, one sample a second (StoreStatsService)."""
SAMPLE_INTERVAL_S = 1.0



def human_readable_bytes(n: int) -> str:
    """MixAll.humanReadableByteCount(bytes, si=false): `512 B`, `1.5 KiB`, `252.0 GiB`."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    value = float(n)
    while value >= 1024 and exp < 6:
        value /= 1024
        exp += 1
    return f"{value:.1f} {'KMGTPE'[exp - 1]}iB"


def format_runtime(ms: int) -> str:
    """StoreStatsService.getFormatRuntime: `[ 0 days, 1 hours, 2 minutes, 3 seconds ]`."""
    seconds = ms // 1000
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3_600)
    minutes, seconds = divmod(seconds, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]"


@dataclass(frozen=True, slots=True)
class TimerFigures:
    """What the timers of a broker's schedule service stand at (RocketMQ's TimerMessageStore figures)."""

    read_behind_s: int = 0
    """How far delivery is behind the earliest due timer, in seconds (getDequeueBehind)."""
    offset_behind: int = 0
    """Timers parked but not read yet (getEnqueueBehindMessages)."""
    congest_num: int = 0
    """Timers read and waiting for their time (getAllCongestNum)."""
    enqueued: int = 0
    """Timers parked since the store began (the timer queue's max offset)."""
    dequeued: int = 0
    """Timers delivered since the broker started."""


TIMER_TPS_WINDOW_S = 10


class BrokerStats:
    """Put and get totals sampled once a second. `totals` returns (messages stored, messages handed
    to consumers) since the broker started; `timers` (set by whoever runs the schedule service) its
    timers' figures."""

    def __init__(self, clock: Clock, totals: Callable[[], tuple[int, int]],
                 timers: Callable[[], TimerFigures] = TimerFigures) -> None:
        self.clock = clock
        self.boot_ms = clock()
        self._totals = totals
        self.timers = timers
        self._samples: collections.deque[tuple[int, int, int, int, int]] = collections.deque(
            maxlen=TPS_WINDOWS_S[-1] + 1)
        self._day = self._local_day(self.boot_ms)
        self.today_morning = (0, 0)
        """(put, get) totals when the current day began (0 until the first midnight, as RocketMQ's)."""
        self.yesterday_morning = (0, 0)
        self.sample()

    @staticmethod
    def _local_day(ms: int) -> datetime.date:
        return datetime.datetime.fromtimestamp(ms / 1000).date()

    def sample(self) -> None:
        """Record the totals now (the broker calls this every SAMPLE_INTERVAL_S); at the first sample of
        a new day the day marks move on, as BrokerStats.record does at midnight."""
        now = self.clock()
        put, get = self._totals()
        day = self._local_day(now)
        if day != self._day:
            self._day = day
            self.yesterday_morning, self.today_morning = self.today_morning, (put, get)
        timers = self.timers()
        self._samples.append((now, put, get, timers.enqueued, timers.dequeued))

    def _tps(self, window_s: int, column: int) -> str:
        """Messages a second over the last `window_s` samples; '' until there are that many (RocketMQ)."""
        if len(self._samples) <= window_s:
            return ""
        before, last = self._samples[-(window_s + 1)], self._samples[-1]
        elapsed_ms = last[0] - before[0]
        return repr((last[column] - before[column]) / elapsed_ms * 1000) if elapsed_ms > 0 else "0.0"

    def _timer_tps(self, column: int) -> str:
        """Timers a second over the last TIMER_TPS_WINDOW_S samples (or as many as there are)."""
        if len(self._samples) < 2:
            return "0.0"
        before = self._samples[-min(len(self._samples), TIMER_TPS_WINDOW_S + 1)]
        last = self._samples[-1]
        elapsed_ms = last[0] - before[0]
        return repr((last[column] - before[column]) / elapsed_ms * 1000) if elapsed_ms > 0 else "0.0"

    def tps(self, column: int) -> str:
        """`10s 1min 10min` TPS as RocketMQ joins them (column 1: put, 2: transferred to consumers)."""
        return " ".join(self._tps(w, column) for w in TPS_WINDOWS_S)

    def runtime_info(self, *, broker_active: bool, store_dir: Path, commit_log_max_offset: int,
                     earliest_message_ms: int, sends_waiting: int, pulls_held: int,
                     commit_log_min_offset: int = 0) -> dict[str, str]:
        """The KVTable of GET_BROKER_RUNTIME_INFO."""
        now = self.clock()
        put, get = self._totals()
        timers = self.timers()
        disk = shutil.disk_usage(store_dir)
        return {
            "brokerVersionDesc": CURRENT_VERSION_DESC,
            "brokerVersion": str(CURRENT_VERSION),
            "brokerActive": "true" if broker_active else "false",
            "bootTimestamp": str(self.boot_ms),
            "runtime": format_runtime(now - self.boot_ms),
            "msgPutTotalYesterdayMorning": str(self.yesterday_morning[0]),
            "msgPutTotalTodayMorning": str(self.today_morning[0]),
            "msgPutTotalTodayNow": str(put),
            "msgGetTotalYesterdayMorning": str(self.yesterday_morning[1]),
            "msgGetTotalTodayMorning": str(self.today_morning[1]),
            "msgGetTotalTodayNow": str(get),
            "putMessageTimesTotal": str(put),
            "putTps": self.tps(1),
            "getTransferredTps": self.tps(2),
            "earliestMessageTimeStamp": str(earliest_message_ms),
            "commitLogMinOffset": str(commit_log_min_offset),
            "commitLogMaxOffset": str(commit_log_max_offset),
            "commitLogDiskRatio": repr(used_ratio(disk.used, disk.free)),  # as retention reads it
            "commitLogDirCapacity": f"Total : {human_readable_bytes(disk.total)}, "
                                    f"Free : {human_readable_bytes(disk.free)}.",
            "pageCacheLockTimeMills": "0",
            "sendThreadPoolQueueSize": str(sends_waiting),
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueSize": str(pulls_held),
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "timerReadBehind": str(timers.read_behind_s),
            "timerOffsetBehind": str(timers.offset_behind),
            "timerCongestNum": str(timers.congest_num),
            "timerEnqueueTps": self._timer_tps(3),
            "timerDequeueTps": self._timer_tps(4),
        }
