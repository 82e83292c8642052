"""What every reader of a REGISTER_BROKER body shares (see `register_body`): the opened body, the
field names a body may use, the slice size and the filter server list's check."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from namesrv.common.slices import Steps
from namesrv.protocol.models import DataVersion
from namesrv.protocol.types import InvalidInput

BodyEncoding = Literal["msgpack", "json", "compressed"]

SLICE = 64
"""Topics read, validated or written between two yields: ~1-2 ms of work (validating a topic costs
~25 us; a slice of 128 was 3 ms, and up to 8 ms with a collection inside it)."""

WRAPPER = ("topicConfigSerializeWrapper", "topic_config_serialize_wrapper")
FILTERS = ("filterServerList", "filter_server_list")
TABLE = ("topicConfigTable", "topic_config_table")
VERSION = ("dataVersion", "data_version")

TopicEntry = tuple[object, object]
"""(key in topicConfigTable, the raw topic config) as the body holds them, not yet validated."""

Opening = Steps["RegisterBody"]


@dataclass(slots=True)
class RegisterBody:
    """An opened REGISTER_BROKER body: its version and filter servers, and its topics on demand."""

    data_version: DataVersion
    filter_server_list: list[str]
    _entries: Callable[[], Iterator[TopicEntry]]

    def topics(self) -> Iterator[TopicEntry]:
        """Each topic of the table in body order; raises InvalidInput on a malformed entry."""
        return self._entries()


def filter_servers(value: object) -> list[str]:
    """A body's filterServerList, checked (None: none)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        raise InvalidInput("filterServerList must be a list of non-blank addresses")
    return list(value)
