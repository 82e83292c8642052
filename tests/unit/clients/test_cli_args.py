"""The `namesrv` command's argument checks, in-process: every bad argument is refused before
anything connects, in one line on stderr with exit 2. (The walks with Ray are in tests/ray/clients/test_cli.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clients.cli.demo import explain_duplicates
from clients.cli.main import main
from clients.cli.support import Terminated, ray_executable
from clients.consumer.pull_consumer import ConsumedMessage

BAD_ARGS = [
    (["route", ""], "topic is blank"),
    (["route", "bad topic!"], "has characters outside"),
    (["route", "T" * 128], "longer than 127"),
    (["topic", "bad topic!"], "has characters outside"),
    (["topic", "T", "--queues", "0"], "0 queues takes no messages"),
    (["topic", "T", "--queues", "-1"], "out of range: allowed from 1 to 1024"),
    (["topic", "T", "--queues", "1025"], "out of range"),
    (["topic", "T", "--queues", "many"], "not an integer"),
    (["topic", "T", "--cluster", "a b"], "cluster name 'a b' has characters outside"),
    (["topic"], "required: topic"),
    (["up", "--namesrvs", "0"], "out of range"),
    (["up", "--slaves", "-1"], "out of range"),
    (["up", "--brokerRole", "SLAVE"], "invalid choice"),
    (["up", "--brokers", "a,,b"], "broker name is blank"),
    (["up", "--brokers", "a,a"], "names a broker twice"),
    (["up", "--brokers", "a/b"], "has characters outside"),
    (["up", "--profile", "turbo"], "invalid choice"),
    (["demo", "--rate", "0"], "above 0"),
    (["demo", "--duration", "-3"], "above 0"),
    (["demo", "--rate", "nan"], "above 0"),
    (["nosuchverb"], "invalid choice"),
    ([], "required: COMMAND"),
]


@pytest.mark.parametrize(("argv", "words"), BAD_ARGS, ids=[" ".join(a) or "nothing" for a, _ in BAD_ARGS])
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert words in lines[0] and "--help" in lines[0], lines[0]


def test_help_says_ray_stop_stops_every_ray_on_the_machine(capsys: pytest.CaptureFixture[str]) -> None:
    for verb in ("down", "up"):
        with pytest.raises(SystemExit):
            main([verb, "--help"])
        assert "EVERY Ray on this machine" in " ".join(capsys.readouterr().out.split())


def test_ray_executable_is_the_one_next_to_this_python() -> None:
    """`.venv/bin/namesrv down --stop-ray` must work without the venv on PATH."""
    assert Path(ray_executable()) == Path(sys.executable).parent / "ray"


def test_duplicates_are_explained_with_where_each_copy_was_stored() -> None:
    first = ConsumedMessage("TopicTest", "broker-a", 1, 17, "MSG1", b"x", {})
    retry = ConsumedMessage("TopicTest", "broker-c", 0, 22, "MSG1", b"x", {})
    record = {"msg_id": "MSG1", "ok": True, "brokers_tried": "broker-a,broker-c", "broker_name": "broker-c",
              "attempts": 2, "latency_ms": 3012.4}
    text = explain_duplicates({"MSG1": [first, retry]}, [record])
    assert "retried" in text and "at-least-once" in text and "RocketMQ" in text
    assert "message MSG1: stored at broker-a queue 1 offset 17, broker-c queue 0 offset 22" in text
    assert "tried broker-a,broker-c and was acknowledged on broker-c after 2 attempts, 3012 ms" in text


def test_replication_overrides() -> None:
    from actors.deployment.profiles import replication_overrides

    assert replication_overrides(0, None) == {}
    assert replication_overrides(0, "SYNC_MASTER") == {"broker_role": "SYNC_MASTER"}
    assert replication_overrides(1, None) == {"broker_role": "SYNC_MASTER", "slave_read_enable": True}
    assert replication_overrides(2, "ASYNC_MASTER") == {"broker_role": "ASYNC_MASTER", "slave_read_enable": True}
    with pytest.raises(ValueError):
        replication_overrides(1, "SLAVE")


@pytest.mark.parametrize(("interrupt", "code", "said"), [
    (KeyboardInterrupt, 130, "interrupted (SIGINT)"),
    (Terminated, 143, "terminated (SIGTERM)"),
])
def test_a_signal_surfacing_as_a_system_error_is_still_reported_as_the_signal(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], interrupt: type[BaseException],
        code: int, said: str) -> None:
    """A signal handler that raises while an extension's C function runs (SIGTERM during Ray's
    `ray.get` in the demo's deploy) reaches the command as a SystemError caused by the signal's
    exception: it is still the interrupt, exit 128 + the signal, in one line."""
    import clients.cli.demo

    def run_demo(*args: object) -> int:
        try:
            raise interrupt()
        except BaseException as e:
            raise SystemError("<built-in method __new__> returned a result with an exception set") from e

    monkeypatch.setattr(clients.cli.demo, "run_demo", run_demo)
    assert main(["demo"]) == code
    err = capsys.readouterr().err
    assert err.strip() == f"namesrv demo: {said}"
