"""The `apache.rocketmq.v2` protocol's message classes, from a descriptor set made at install time.

The generated code comes from a package, never from this repository: `run.sh` installs the PyPI
`rocketmq-python-client` wheel (pinned in requirements-rmq5.lock) into a folder of the venv and runs
`python -m namesrv.proxy.descriptors build DIR OUT`, which loads only its generated modules and serialises
the wheel's `definition.proto` and `service.proto` (with their google imports) into one
FileDescriptorSet at `<venv>/share/rocketmq-v2/messaging.fds`. The wheel's own top-level package
`rocketmq` collides with the 4.x client's, so it is never imported by the proxy: `load()` reads the
set into a pool of its own and makes the classes with protobuf's message factory.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "apache.rocketmq.v2"
SERVICE = f"{PACKAGE}.MessagingService"
ENV_PATH = "NAMESRV_RMQ5_DESCRIPTORS"
"""Overrides where the descriptor set is read from."""


def default_path() -> Path:
    return Path(os.environ.get(ENV_PATH) or Path(sys.prefix) / "share" / "rocketmq-v2" / "messaging.fds")


class DescriptorsMissing(RuntimeError):
    """No descriptor set: the venv was not set up by run.sh."""


@dataclass(frozen=True)
class Protocol:
    """The v2 message classes by short name (`p.cls("SendMessageRequest")`), the Code enum and the
    service's methods (name -> (request class, response class, client streams, server streams))."""

    pool: descriptor_pool.DescriptorPool
    _classes: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def cls(self, name: str) -> Any:
        c = self._classes.get(name)
        if c is None:
            c = self._classes[name] = message_factory.GetMessageClass(
                self.pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        return c

    def new(self, name: str, **fields: Any) -> Any:
        return self.cls(name)(**fields)

    def enum(self, enum_name: str, value_name: str) -> int:
        """A value of a v2 enum by name (`enum("Code", "OK")` -> 20000)."""
        value: int = self.pool.FindEnumTypeByName(f"{PACKAGE}.{enum_name}").values_by_name[value_name].number
        return value

    def enum_numbers(self, enum_name: str) -> dict[str, int]:
        """A v2 enum's values by name."""
        return {v.name: v.number for v in self.pool.FindEnumTypeByName(f"{PACKAGE}.{enum_name}").values}

    def enum_name(self, enum_name: str, number: int) -> str:
        values = self.pool.FindEnumTypeByName(f"{PACKAGE}.{enum_name}").values_by_number
        return str(values[number].name) if number in values else str(number)

    def methods(self) -> dict[str, tuple[Any, Any, bool, bool]]:
        service = self.pool.FindServiceByName(SERVICE)
        return {m.name: (message_factory.GetMessageClass(m.input_type), message_factory.GetMessageClass(m.output_type),
                         m.client_streaming, m.server_streaming) for m in service.methods}


@cache
def load(path: str | None = None) -> Protocol:
    """The protocol from the descriptor set at `path` (default: the venv's)."""
    p = Path(path) if path else default_path()
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise DescriptorsMissing(
            f"no RocketMQ 5 protocol descriptors at {p}: set up the venv with run.sh (it builds them from the "
            f"pinned rocketmq-python-client wheel), or point {ENV_PATH} at a set") from None
    fds = descriptor_pb2.FileDescriptorSet.FromString(data)
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:  # written dependencies first
        pool.Add(f)
    pool.FindServiceByName(SERVICE)  # a set without the service is not one
    return Protocol(pool)


def build(wheel_dir: Path, out: Path) -> None:
    """Serialise the v2 protocol (and what it imports) of the wheel unpacked at `wheel_dir` into
    `out` (write, fsync, rename). Only its generated modules run: the wheel's `rocketmq` package
    stands in as an empty namespace, so the client itself (and its dependencies) is never imported."""
    import importlib
    import types

    for name, folder in (("rocketmq", wheel_dir / "rocketmq"),
                         ("rocketmq.grpc_protocol", wheel_dir / "rocketmq" / "grpc_protocol")):
        if not folder.is_dir():
            raise SystemExit(f"{folder} is missing: not an unpacked rocketmq-python-client wheel")
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(folder)]
        sys.modules[name] = pkg
    service_pb2: Any = importlib.import_module("rocketmq.grpc_protocol.service_pb2")

    files: list[Any] = []
    seen: set[str] = set()

    def visit(fd: Any) -> None:
        if fd.name in seen:
            return
        seen.add(fd.name)
        for dep in fd.dependencies:
            visit(dep)
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        files.append(proto)

    visit(service_pb2.DESCRIPTOR)
    fds = descriptor_pb2.FileDescriptorSet(file=files)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        fh.write(fds.SerializeToString())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "build":
        raise SystemExit("usage: python -m namesrv.proxy.descriptors build WHEEL_DIR OUT")
    build(Path(sys.argv[2]), Path(sys.argv[3]))
