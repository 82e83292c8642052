"""cluster.yaml checked without a cluster: validated the way `ray up` validates it, its commands
parsed by the CLIs they call, and `ray up` dry-run with a recording process runner.

The dry run drives Ray's own `ray up` code (`_bootstrap_config` then `get_or_create_head_node`,
with the real local node provider and ssh command runner); only the process runner is replaced,
so every ssh and rsync invocation is recorded instead of executed.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
import yaml
from ray.autoscaler._private import commands
from ray.autoscaler._private.util import prepare_config, validate_config
from ray.scripts.scripts import start as ray_start_command

from clients.cli.deploy import launcher_node_count
from clients.cli.main import build_parser
from clients.cli.support import CLIError
from tests.support.ssh import remove_ssh_control_dir

REPO = Path(__file__).resolve().parents[2]
CLUSTER_YAML = REPO / "cluster.yaml"


def load_cluster_yaml() -> dict[str, Any]:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def validate_as_ray_up(config: dict[str, Any]) -> dict[str, Any]:
    """What `ray up` does before touching a node (commands._bootstrap_config): fill in the provider's
    defaults, then check the result against Ray's schema."""
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


# ============================================================================ offline validation
def test_cluster_yaml_validates_as_ray_up_does() -> None:
    raw = load_cluster_yaml()
    with pytest.raises(RuntimeError, match="cluster_synced_files"):
        validate_config(copy.deepcopy(raw))  # the raw file is not the schema's input: prepare first

    prepared = validate_as_ray_up(raw)

    assert prepared["provider"]["type"] == "local"
    assert prepared["head_node_type"] == "local.cluster.node"
    # setup_commands run on the head and on every worker, before anything else.
    assert prepared["head_setup_commands"] == raw["setup_commands"]
    assert prepared["worker_setup_commands"] == raw["setup_commands"]
    for remote, local in raw["file_mounts"].items():
        assert (REPO / local).exists(), f"file mount {remote} -> {local} does not exist in the repo"
        assert remote.startswith("~/ray-namesrv/")


def test_the_aws_variant_in_the_docs_validates_and_matches_cluster_yaml() -> None:
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / "cluster.md").read_text(), re.S)
              if "type: aws" in b]
    assert len(blocks) == 1
    aws = yaml.safe_load(blocks[0])
    local = load_cluster_yaml()

    prepared = validate_as_ray_up(aws)

    assert prepared["available_node_types"]["worker"]["min_workers"] == 2
    # Same project, same install, same deployment; only the machines differ.
    assert aws["file_mounts"] == local["file_mounts"] and aws["setup_commands"] == local["setup_commands"]
    assert aws["head_start_ray_commands"][-1] == local["head_start_ray_commands"][-1]


def test_worker_ips_become_the_worker_count() -> None:
    raw = load_cluster_yaml()
    raw["provider"]["worker_ips"] = ["10.0.0.12", "10.0.0.13"]

    node_type = validate_as_ray_up(raw)["available_node_types"]["local.cluster.node"]

    assert (node_type["min_workers"], node_type["max_workers"]) == (2, 2)


def test_wait_nodes_launcher_counts_the_head_and_every_worker_ray_up_starts(tmp_path: Path) -> None:
    bootstrap = tmp_path / "ray_bootstrap_config.yaml"  # `ray up` writes the prepared config as JSON
    raw = load_cluster_yaml()
    raw["provider"]["worker_ips"] = ["10.0.0.12", "10.0.0.13"]
    bootstrap.write_text(json.dumps(validate_as_ray_up(raw)))
    assert launcher_node_count(str(bootstrap)) == 3

    bootstrap.write_text(json.dumps(validate_as_ray_up(load_cluster_yaml())))  # no workers: the head alone
    assert launcher_node_count(str(bootstrap)) == 1

    with pytest.raises(CLIError, match="no cluster config of `ray up` here"):
        launcher_node_count(str(tmp_path / "absent.yaml"))
    bootstrap.write_text("provider: {type: local}\n")
    with pytest.raises(CLIError, match="is not a cluster config"):
        launcher_node_count(str(bootstrap))


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    *parents, key = path.split(".")

    def mutate(config: dict[str, Any]) -> None:
        for p in parents:
            config = config[p]
        config[key] = value

    return mutate


def _rename(path: str, new_key: str) -> Callable[[dict[str, Any]], None]:
    *parents, key = path.split(".")

    def mutate(config: dict[str, Any]) -> None:
        for p in parents:
            config = config[p]
        config[new_key] = config.pop(key)

    return mutate


@pytest.mark.parametrize(
    ("mutate", "error", "message"),
    [
        (_rename("setup_commands", "setup_comands"), jsonschema.ValidationError, "'setup_comands' was unexpected"),
        (_rename("auth.ssh_user", "ssh_usr"), jsonschema.ValidationError, "'ssh_usr' was unexpected"),
        (_set("auth.ssh_user", ["root"]), jsonschema.ValidationError, "is not of type 'string'"),
        (_set("provider.head_ip", ["127.0.0.1"]), jsonschema.ValidationError, "is not of type 'string'"),
        (_set("provider.worker_ips", "10.0.0.12"), jsonschema.ValidationError, "is not of type 'array'"),
        (_set("head_start_ray_commands", "ray start --head"), jsonschema.ValidationError, "is not of type 'array'"),
        (_set("rsync_exclude", "**/__pycache__"), jsonschema.ValidationError, "is not of type 'array'"),
        (_set("idle_timeout_minutes", "5"), jsonschema.ValidationError, "is not of type 'number'"),
        # The local provider rejects node types (it builds its single one from head_ip/worker_ips).
        (_set("available_node_types", {"big": {"node_config": {}, "resources": {}}}), click.ClickException,
         "available_node_types is not supported"),
    ],
    ids=["top-level-typo", "auth-typo", "ssh_user-list", "head_ip-list", "worker_ips-str",
         "start-commands-str", "rsync_exclude-str", "idle_timeout-str", "node-types-on-local"],
)
def test_a_broken_cluster_yaml_is_rejected(
    mutate: Callable[[dict[str, Any]], None], error: type[Exception], message: str
) -> None:
    config = load_cluster_yaml()
    mutate(config)
    with pytest.raises(error) as excinfo:
        validate_as_ray_up(config)
    assert message in str(excinfo.value)


def _commands_of(config: dict[str, Any], program: str) -> list[list[str]]:
    keys = ("setup_commands", "head_start_ray_commands", "worker_start_ray_commands")
    return [
        argv for key in keys for cmd in config[key]
        if (argv := _without_env_assignments(shlex.split(cmd.split(";")[-1])))[:1] == [program]
    ]


def _without_env_assignments(argv: list[str]) -> list[str]:
    """A shell command's words after its leading `NAME=value` assignments."""
    while argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
        argv = argv[1:]
    return argv


def test_every_ray_start_in_the_yaml_parses_with_rays_cli() -> None:
    config = load_cluster_yaml()
    starts = [argv for argv in _commands_of(config, "ray") if argv[1] == "start"]
    assert len(starts) == 2

    params = {argv[2] == "--head": ray_start_command.make_context("start", argv[2:]).params for argv in starts}

    head, worker = params[True], params[False]
    assert head["port"] == 6379 and head["autoscaling_config"] == "~/ray_bootstrap_config.yaml"
    assert worker["address"] == "$RAY_HEAD_IP:6379"  # the launcher exports RAY_HEAD_IP on workers
    with pytest.raises(click.NoSuchOption):  # the check has teeth
        ray_start_command.make_context("start", ["--head", "--dashbord-port=8265"])


def test_every_namesrv_command_in_the_yaml_parses_with_our_cli() -> None:
    config = load_cluster_yaml()
    namesrv = _commands_of(config, "namesrv")
    assert len(namesrv) == 1, namesrv

    args = build_parser().parse_args(namesrv[0][1:])

    assert args.command == "up" and args.address == "auto" and args.namespace == "namesrv"
    assert args.pin_brokers and args.spread_namesrvs and args.wait_nodes == "launcher"
    assert args.namesrvs == 2 and args.brokers == ["broker-a", "broker-b"]
    assert args.listen_host == "0.0.0.0", "clients on other hosts must reach the NameServers"
    # The setup command runs a run.sh job that exists and installs the venv first.
    setup = config["setup_commands"][-1]
    assert "bash run.sh namesrv" in setup
    assert re.search(r"^\s*namesrv\)\s+.*ensure_venv", (REPO / "run.sh").read_text(), re.M)


# ============================================================================ dry run of `ray up`
class RecordingProcessRunner:
    """Stands in for the `subprocess` module Ray's command runners call: records, runs nothing.

    The temporary bootstrap config `ray up` rsyncs to the head is read when it is "synced", because
    it is deleted right after.
    """

    DEVNULL = subprocess.DEVNULL

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.bootstrap_config: dict[str, Any] | None = None

    def check_call(self, cmd: list[str], **_: Any) -> int:
        self.calls.append(list(cmd))
        if cmd[0] == "rsync" and cmd[-1].endswith(":~/ray_bootstrap_config.yaml"):
            self.bootstrap_config = json.loads(Path(cmd[-2]).read_text())
        return 0

    def check_output(self, cmd: list[str], **_: Any) -> bytes:
        self.calls.append(list(cmd))
        return b""


_REMOTE = re.compile(r"^source ~/\.bashrc; export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore && \((.*)\)$", re.S)
_ENV_PREFIX = re.compile(r"^(export [A-Za-z_][A-Za-z0-9_]*=[^;]*;\s*)+")


def timeline(calls: list[list[str]]) -> list[tuple[str, str]]:
    """('run', remote command without Ray's env exports) or ('sync', 'local -> remote'), in order."""
    events = []
    for cmd in calls:
        if cmd[0] == "ssh":
            remote = _REMOTE.match(shlex.split(cmd[-1])[0])
            assert remote, cmd
            events.append(("run", _ENV_PREFIX.sub("", remote.group(1))))
        elif cmd[0] == "rsync":
            events.append(("sync", f"{cmd[-2]} -> {cmd[-1].split(':', 1)[1]}"))
        else:
            raise AssertionError(f"unexpected process: {cmd}")
    return events


@pytest.fixture
def dry_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[dict[str, Any], RecordingProcessRunner]]:
    """`ray up -y cluster.yaml` up to the end of the head's start commands, nothing executed."""
    monkeypatch.chdir(REPO)  # file_mounts are relative to where `ray up` runs: the repo root
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # the local provider's state file goes here
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    key = tmp_path / "id_test"
    key.write_text("not a real key: nothing is executed\n")
    config = load_cluster_yaml()
    config["cluster_name"] = f"dry-run-{tmp_path.name}"[:40]
    config["auth"]["ssh_private_key"] = str(key)  # `ray up` hashes the key file, so it must exist

    bootstrapped = commands._bootstrap_config(config, no_config_cache=True)
    runner = RecordingProcessRunner()
    try:
        commands.get_or_create_head_node(
            bootstrapped, str(CLUSTER_YAML), no_restart=False, restart_only=False, yes=True,
            override_cluster_name=None, _runner=runner,
        )
        yield config, runner
    finally:
        remove_ssh_control_dir(config["cluster_name"])


def test_dry_run_syncs_then_sets_up_then_starts_ray_then_deploys(
    dry_run: tuple[dict[str, Any], RecordingProcessRunner],
) -> None:
    config, runner = dry_run
    events = timeline(runner.calls)
    runs = [e[1] for e in events if e[0] == "run"]

    def index(event: tuple[str, str]) -> int:
        assert events.count(event) == 1, f"{event} expected once in {events}"
        return events.index(event)

    # Every ssh and rsync goes to the configured head, as the configured user, with the key.
    for cmd in runner.calls:
        assert f"root@{config['provider']['head_ip']}" in " ".join(cmd)
        assert config["auth"]["ssh_private_key"] in " ".join(cmd)
    # First the node is probed, then the project is synced (minus caches), then the setup runs,
    # then Ray restarts, then the NameServers and brokers are deployed; nothing after that.
    assert runs[0] == "uptime"
    syncs = [index(("sync", f"{local.rstrip('/')}{'/' if (REPO / local).is_dir() else ''} -> "
                            f"{remote}{'/' if (REPO / local).is_dir() else ''}"))
             for remote, local in config["file_mounts"].items()]
    setup = [index(("run", cmd)) for cmd in config["setup_commands"]]
    start = [index(("run", cmd)) for cmd in config["head_start_ray_commands"]]
    assert max(syncs) < min(setup)
    assert setup == sorted(setup) and start == sorted(start)
    assert max(setup) < min(start)
    assert start[-1] == len(events) - 1
    assert [r for r in runs if _without_env_assignments(r.split())[:1] == ["ray"]] == \
        ["ray stop", config["head_start_ray_commands"][1]]
    assert events[start[-1]][1].startswith("namesrv up --address auto")
    for cmd in runner.calls:
        if cmd[0] == "rsync":
            assert cmd[cmd.index("--exclude") + 1] == "**/__pycache__"


def test_dry_run_hands_the_head_a_config_that_sets_up_workers_the_same_way(
    dry_run: tuple[dict[str, Any], RecordingProcessRunner],
) -> None:
    config, runner = dry_run
    remote = runner.bootstrap_config
    assert remote is not None, "ray up did not sync ~/ray_bootstrap_config.yaml to the head"
    events = timeline(runner.calls)
    assert ("sync", f"{config['auth']['ssh_private_key']} -> ~/ray_bootstrap_key.pem") in events

    # The head's autoscaler reaches workers with the synced key and copies the project from its own
    # ~/ray-namesrv, then runs the same setup and the worker start commands.
    assert remote["auth"]["ssh_private_key"] == "~/ray_bootstrap_key.pem"
    assert remote["file_mounts"] == {r: r for r in config["file_mounts"]}
    assert remote["worker_setup_commands"] == config["setup_commands"]
    assert remote["worker_start_ray_commands"] == config["worker_start_ray_commands"]
    assert remote["rsync_exclude"] == config["rsync_exclude"]
