"""Diagnose one stuck partition: the rules over its latest snapshots, its members, the record at
the committed offset. Read-only; the evidence a runbook shows before offering a fix."""

from __future__ import annotations

import datetime as dt

from fleetkit.stuck import rules as stuck
from fleetkit.core.datasets import DataRoot, iso_z, read_dataset, utcnow
from fleetkit.clients.kafka import KafkaCluster


def diagnose_partition(kafka: KafkaCluster, root: DataRoot, cluster: str, group: str, topic: str, partition: int,
                       window: dt.timedelta = stuck.DEFAULT_WINDOW) -> dict:
    since = (utcnow() - dt.timedelta(days=2)).date()
    rows = [r for r in read_dataset(root, "offsets_snapshots", cluster, since=since).to_pylist()
            if r["group"] == group and r["topic"] == topic and r["partition"] == partition]
    status, reason = "UNKNOWN", "No snapshots of this partition were collected in the last two days."
    if rows:
        as_of = max(r["observed_at"] for r in rows)
        status, reason = stuck.classify(stuck.features(rows, as_of, window), window.total_seconds())
    latest = max(rows, key=lambda r: r["observed_at"]) if rows else None
    desc = kafka.describe_groups([group])[group]
    committed = kafka.group_offsets(group, [(topic, partition)]).get((topic, partition))
    start, end, err = kafka.log_offsets([(topic, partition)])[(topic, partition)]
    record = None
    if committed is not None and end is not None and committed < end:
        record = kafka.record_at(topic, partition, committed)
    members = [{"client_id": m.client_id, "host": m.host, "assigned_here": bool(m.assignment and (topic, partition)
                                                                                 in m.assignment)}
               for m in desc.members]
    return {
        "status": status, "reason": reason, "snapshots": len(rows),
        "last_snapshot": iso_z(latest["observed_at"]) if latest else None,
        "group_state": desc.state, "members": members,
        "committed_offset": committed, "log_start_offset": start, "log_end_offset": end, "log_error": err,
        "lag": None if committed is None or end is None else end - committed,
        "record_at_committed_offset": record,
    }


def evidence_items(d: dict) -> list[dict]:
    """The diagnosis as label/value pairs for the approval page."""
    rec = d.get("record_at_committed_offset") or {}
    members = ", ".join(f"{m['client_id']}@{m['host']}{' (assigned)' if m['assigned_here'] else ''}"
                        for m in d["members"]) or "none (no live members)"
    return [
        {"label": "status", "value": f"{d['status']}: {d['reason']}"},
        {"label": "snapshots in the last two days", "value": f"{d['snapshots']} (latest {d['last_snapshot']})"},
        {"label": "group state and members", "value": f"{d['group_state']}; {members}"},
        {"label": "committed / log start / log end / lag",
         "value": f"{d['committed_offset']} / {d['log_start_offset']} / {d['log_end_offset']} / {d['lag']}"},
        {"label": "record at the committed offset",
         "value": ("none (caught up)" if not rec else
                   f"offset {rec.get('offset')}, timestamp {rec.get('timestamp')}, key {rec.get('key')}, "
                   f"{rec.get('size')} bytes" if "error" not in rec else f"not readable: {rec['error']}")},
    ]
