"""The run's verdicts on what it measured (clients.chaos.invariants), the model being Ray's chaos
release tests, where every sequence number must be accounted for and resources must come back:

1. every acknowledged message is readable;
2. a sync send fails only when every broker it tried was faulted;
3. a dead broker leaves every NameServer and every producer's route cache in bound, and a revived
   one comes back everywhere in bound; no live broker is ever removed (3d); a broker only some
   NameServers lost (a partition between them) stays in every producer's route (3e);
4. nothing leaked: actors, tasks, threads, temp dirs (clients.chaos.leaks).

The others have the modules of what they judge: one master per set (roles), the history's H1-H5
(history), a consumer group's ownership (ownership).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clients.chaos.invariants import Detection


@dataclass(slots=True)
class Invariant:
    name: str
    ok: bool
    value: str
    detail: str = ""


def _store_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return r["topic"], r["broker_name"], r["queue_id"], r["queue_offset"]


def check_no_loss(acked: list[dict[str, Any]], consumed: list[Any]) -> tuple[Invariant, dict[str, int]]:
    """Invariant 1: every acknowledged (topic, broker, queue, offset) reads back with its msgId.
    Marks each acknowledged record with `lost` (True / False), so losses can be told per fault."""
    stored = {(m.topic, m.broker_name, m.queue_id, m.queue_offset): m.msg_id for m in consumed}
    lost = []
    for r in acked:
        r["lost"] = stored.get(_store_key(r)) != r["msg_id"]
        if r["lost"]:
            lost.append(r)
    ids = [m.msg_id for m in consumed]
    acked_ids = {r["msg_id"] for r in acked}
    counts = {
        "acknowledged": len(acked),
        "consumed": len(consumed),
        "lost": len(lost),
        "duplicates": len(ids) - len(set(ids)),
        "stored_unacknowledged": len(set(ids) - acked_ids),
    }
    where = [_store_key(r) for r in lost[:3]]
    example = f"; e.g. {where}" if lost else ""
    return Invariant(
        "1 every acknowledged message is readable",
        not lost,
        f"{counts['lost']} lost of {counts['acknowledged']}",
        f"{counts['consumed']} consumed, {counts['duplicates']} duplicate msgIds, "
        f"{counts['stored_unacknowledged']} stored but never acknowledged (failed or timed-out sends){example}",
    ), counts


def check_sends(records: list[dict[str, Any]]) -> tuple[Invariant, dict[str, Any]]:
    """Invariant 2: a sync send fails only when every broker it tried was faulted; `explained` must
    be filled in on every failed record first (see `explain_failure`)."""
    failed = [r for r in records if not r["ok"]]
    unexplained = [r for r in failed if not r.get("explained")]
    acked = len(records) - len(failed)
    rate = acked / len(records) if records else 1.0
    counts = {"attempted": len(records), "acknowledged": acked, "failed": len(failed),
              "unexplained_failures": len(unexplained), "success_rate": rate,
              "retried": sum(1 for r in records if r["ok"] and r["attempts"] > 1)}
    reasons: dict[str, int] = {}
    for r in failed:
        key = r.get("explained") or f"UNEXPLAINED: {(r.get('error') or '')[:120]}"
        reasons[key] = reasons.get(key, 0) + 1
    detail = "; ".join(f"{n}x {k}" for k, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:6])
    return Invariant(
        "2 sync sends succeed while a writable broker lives",
        not unexplained and bool(records),
        f"{rate:.2%} ({acked}/{len(records)}), {len(unexplained)} unexplained failures",
        f"{counts['retried']} acknowledged after a retry" + (f"; failures: {detail}" if detail else ""),
    ), counts


def check_no_live_removal(spurious: list[dict[str, Any]]) -> Invariant:
    """Invariant 3d: no NameServer removed a broker no fault touched (see `spurious_removals`)."""
    example = "; ".join(f"{r['namesrv']} removed {r['broker_addr']} ({r['cause']}) at {r['t_ms']}"
                        for r in spurious[:3])
    return Invariant("3d no live broker is ever removed", not spurious,
                     f"{len(spurious)} removals of brokers no fault touched", example)


def check_kept_routes(rows: list[dict[str, Any]]) -> Invariant:
    """Invariant 3e (see `measure_kept_routes`)."""
    judged = [r for r in rows if r["judged"]]
    bad = [r for r in judged if r["lacking_ms"]]
    detail = "; ".join(f"fault {r['fault_id']} {r['broker']} | {r['namesrv']}: {r['producer']} lacked it at "
                       f"+{r['lacking_ms'][0] - r['from_ms']} ms" for r in bad[:4])
    skipped = len(rows) - len(judged)
    return Invariant("3e a broker one NameServer lost stays in every producer's route", not bad,
                     f"{len(judged) - len(bad)}/{len(judged)} producers kept it"
                     + (f" ({skipped} not judged: another NameServer restarted meanwhile)" if skipped else ""), detail)


def check_detections(name: str, rows: list[Detection], what: str) -> Invariant:
    bad = [d for d in rows if not d.ok]
    worst = max((d.elapsed_ms for d in rows if d.elapsed_ms is not None), default=None)
    detail = "; ".join(
        f"fault {d.fault_id} {d.kind} {d.broker_addr} @ {d.observer}: "
        f"{'never' if d.elapsed_ms is None else f'{d.elapsed_ms} ms'} > {d.bound_ms} ms"
        for d in bad[:5]
    )
    return Invariant(name, not bad, f"{len(rows) - len(bad)}/{len(rows)} {what}"
                     + (f", max {worst} ms" if worst is not None else ""), detail)
