"""Helpers shared by the core tests (no fixtures: those live in conftest.py)."""

from __future__ import annotations

import json

from namesrv.routeinfo.processor import DefaultRequestProcessor


def state(processor: DefaultRequestProcessor, *, drop_heartbeat_times: bool = False) -> bytes:
    """Everything a request may change, as canonical bytes (the fuzz test reuses this)."""
    tables = processor.rim.dump_tables()
    if drop_heartbeat_times:
        for live in tables["brokerLiveTable"].values():  # type: ignore[union-attr]
            live.pop("lastUpdateTimestamp")
    return json.dumps(
        {
            "tables": tables,
            "index": {k: sorted(v) for k, v in sorted(processor.rim.tables.broker_topics.items())},
            "kv": processor.kv.table,
            "config": processor.config.model_dump(),
            "route_seq": processor.rim.route_seq,
        },
        sort_keys=True,
        default=repr,
    ).encode()
