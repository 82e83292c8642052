"""What can go wrong on the client side, named as RocketMQ's client names it."""

from __future__ import annotations

from namesrv.remoting.command import MQServerError


class MQClientError(Exception):
    """A client-side error (bad message or group, no route, no name server); nothing was sent."""


class TopicNotFound(MQClientError):
    """No NameServer has a route for the topic (TOPIC_NOT_EXIST)."""

    def __init__(self, topic: str, detail: str = "") -> None:
        super().__init__(f"No route info of this topic: {topic}" + (f" ({detail})" if detail else ""))
        self.topic = topic


class NoNameServerAvailable(MQClientError):
    """No NameServer answered (every one was dead, timed out, or still not ready after a restart)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"no name server available: {detail}")


class NameServerNotReady(MQClientError):
    """A NameServer is inside its 'not ready' window after a (re)start; ask another one."""


class NameServerLate(MQClientError):
    """A NameServer asked beside others answered later than the grace after the first answer; it
    is neither dead nor refusing, and what it said before still stands."""


class MQBrokerError(MQServerError):
    """The broker answered, with an error code (RocketMQ's MQBrokerException): the servers' one
    refusal type, naming the broker that answered."""

    def __init__(self, code: int, remark: str | None, broker_name: str) -> None:
        super().__init__(code, remark)
        self.args = (code, remark, broker_name)  # what pickling rebuilds it from
        self.broker_name = broker_name

    def __str__(self) -> str:
        return f"broker {self.broker_name} answered code {self.code}: {self.remark}"


class RemotingError(Exception):
    """The broker did not answer: it died, timed out, or cannot be found."""


class SendFailedError(MQClientError):
    """Every attempt failed; `failures` lists (broker name, error) per attempt, in order."""

    def __init__(self, topic: str, failures: list[tuple[str, str]], cost_ms: int, timed_out: bool = False) -> None:
        brokers = [b for b, _ in failures]
        reason = "send timeout" if timed_out else "still failed"
        detail = "; ".join(f"{b}: {e}" for b, e in failures)
        super().__init__(
            f"Send [{len(failures)}] times, {reason}, cost [{cost_ms}]ms, Topic: {topic}, "
            f"BrokersSent: {brokers}: {detail}"
        )
        self.topic = topic
        self.failures = failures
        self.brokers_tried = brokers
        self.timed_out = timed_out


def classify_failure(e: BaseException) -> tuple[str, str]:
    """(kind, message) of a failed send attempt, kinds as `send_engine.FAILED_ATTEMPT_KINDS`: the
    broker answered an error, no answer came, or something else was raised; the message keeps what
    the broker said."""
    if isinstance(e, MQBrokerError):
        return "broker_error", str(e)
    if isinstance(e, RemotingError):
        return "no_answer", str(e)
    return "unexpected", f"{type(e).__name__}: {e}"


def brief(e: BaseException, limit: int = 160) -> str:
    """An error in one short line for a log: its type and the first line of its message (Ray's
    errors run to a dozen lines of advice)."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    first = first if len(first) <= limit else first[: limit - 1] + "…"
    return f"{type(e).__name__}: {first}" if first else type(e).__name__
