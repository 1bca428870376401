"""Planning a consumer group's offset reset, and the diagnosis of a stuck partition.

The fix for a consumer stuck on a poison record: with the group stopped (no live members), move
its committed offset past the record (``skip 1``), or to the log start / end, or to an offset.

Targets: ``earliest`` | ``latest`` | ``offset N`` | ``skip N`` (N records forward from the
committed offset) | ``restore`` (explicit per-partition offsets, used by rollbacks).

``build_plan`` is the reset's approval-gate plan (the offsets before and after, the
preconditions fleetkit.stuck.execute re-checks, the rollback). ``diagnose_partition`` is the
stuck-partition runbook's analysis -- the rules over the partition's latest snapshots, its
members, the record at the committed offset; read-only -- and ``build_skip_plan`` the plan it
offers: skip N records, with the diagnosis as the plan's evidence.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from fleetkit.clients.kafka import KafkaCluster
from fleetkit.core.datasets import DataRoot, iso_z, read_dataset, utcnow
from fleetkit.core.errors import FleetError
from fleetkit.core.kafka_names import EMPTY_STATES
from fleetkit.stuck import rules as stuck

ACTION = "reset_offsets"
DAG_ID = "runbook_stuck_reset"


class ResetError(FleetError):
    pass


@dataclass(frozen=True)
class Target:
    kind: str  # earliest | latest | offset | skip | restore
    value: int | None = None
    offsets: dict | None = None

    def describe(self) -> str:
        if self.kind in ("offset", "skip"):
            return f"{self.kind} {self.value}"
        return self.kind


_TARGET = re.compile(r"^\s*(earliest|latest|restore|offset\s+(-?\d+)|skip\s+(-?\d+))\s*$", re.I)


def parse_target(target: str, offsets: dict | None = None) -> Target:
    m = _TARGET.match(str(target or ""))
    if not m:
        raise ResetError(f"target {target!r} is not one of: earliest, latest, offset N, skip N, restore")
    word = m.group(1).split()[0].lower()
    if word == "offset":
        n = int(m.group(2))
        if n < 0:
            raise ResetError(f"target {target!r}: an offset cannot be negative")
        return Target("offset", n)
    if word == "skip":
        n = int(m.group(3))
        if n <= 0:
            raise ResetError(f"target {target!r}: skip needs a positive number of records")
        return Target("skip", n)
    if word == "restore":
        if not offsets:
            raise ResetError("target 'restore' needs the offsets param: {partition: offset, ...}")
        try:
            clean = {int(p): int(o) for p, o in offsets.items()}
        except (TypeError, ValueError, AttributeError):
            raise ResetError(f"offsets param {offsets!r} must map partition numbers to offsets") from None
        if any(o < 0 for o in clean.values()):
            raise ResetError(f"offsets param {offsets!r}: offsets cannot be negative")
        return Target("restore", offsets=clean)
    return Target(word)


def parse_partitions(value) -> list[int] | None:
    """'all' / None / '' -> None (every partition); '0,2' / [0, 2] / 3 -> a sorted list."""
    if value is None or value == "" or (isinstance(value, str) and value.strip().lower() == "all"):
        return None
    items = value if isinstance(value, list) else str(value).split(",")
    try:
        parts = sorted({int(str(p).strip()) for p in items if str(p).strip() != ""})
    except ValueError:
        raise ResetError(f"partitions {value!r} must be 'all' or partition numbers like 0,2") from None
    if not parts or parts[0] < 0:
        raise ResetError(f"partitions {value!r} must be 'all' or non-negative partition numbers")
    return parts


def new_offset(target: Target, partition: int, committed: int | None, start: int, end: int) -> int:
    if target.kind == "earliest":
        return start
    if target.kind == "latest":
        return end
    if target.kind == "offset":
        wanted = target.value
    elif target.kind == "skip":
        if committed is None:
            raise ResetError(f"partition {partition}: the group has no committed offset to skip forward from")
        wanted = committed + target.value
    else:
        if partition not in target.offsets:
            raise ResetError(f"partition {partition}: not in the restore offsets")
        wanted = target.offsets[partition]
    if not start <= wanted <= end:
        raise ResetError(f"partition {partition}: offset {wanted} is outside the log [{start}, {end}]")
    return wanted


def build_plan(kafka: KafkaCluster, cluster: str, group: str, topic: str, partitions, target: str,
               offsets: dict | None = None) -> dict:
    if not group or not topic:
        raise ResetError("a group and a topic are required")
    tgt = parse_target(target, offsets)
    md = kafka.metadata([topic])
    known = sorted(p for (t, p) in md.partitions if t == topic)
    if not known:
        raise ResetError(f"topic {topic!r} does not exist on cluster {cluster!r}")
    wanted = parse_partitions(partitions)
    if tgt.kind == "restore" and wanted is None:
        wanted = sorted(tgt.offsets)
    parts = known if wanted is None else wanted
    unknown = [p for p in parts if p not in known]
    if unknown:
        raise ResetError(f"topic {topic!r} has no partition(s) {unknown} (it has {known[0]}..{known[-1]})")
    tps = [(topic, p) for p in parts]
    committed = kafka.group_offsets(group, tps)
    logs = kafka.log_offsets(tps)
    desc = kafka.describe_groups([group])[group]
    changes, rows = [], []
    for (t, p) in tps:
        start, end, err = logs[(t, p)]
        if err or start is None or end is None:
            raise ResetError(f"partition {t}-{p}: log offsets not readable ({err})")
        before = committed.get((t, p))
        after = new_offset(tgt, p, before, start, end)
        rows.append({"partition": p, "committed": before, "log_start": start, "log_end": end, "new": after,
                     "lag_before": None if before is None else end - before, "lag_after": end - after})
        changes.append({"target": f"{t}-{p}", "before": before, "after": after})
    previous = {str(r["partition"]): r["committed"] for r in rows if r["committed"] is not None}
    refused_now = []
    live = live_members(group, desc)
    if live:
        refused_now.append(
            f"{live}: Kafka refuses an offset change of a group with live members, and the execution re-checks it. "
            "Stop the group's consumers first (until it shows Empty), then approve; or reject and plan again later.")
    rollback_conf = {"cluster": cluster, "group": group, "topic": topic,
                     "partitions": ",".join(previous), "target": "restore", "offsets": previous,
                     "dry_run": True}
    return {
        "action": ACTION,
        "cluster": cluster,
        "title": f"Reset offsets of group {group} on {topic} ({tgt.describe()})",
        "created_at": iso_z(utcnow()),
        "preconditions": [
            {"check": "group_empty", "what": f"group {group} has no live members (state Empty or Dead)",
             "observed": {"state": desc.state, "members": len(desc.members)}},
            {"check": "committed_unchanged", "what": "the committed offsets are still those shown under 'Current state'",
             "expected": {str(p): committed.get((topic, p)) for p in parts}},
        ],
        "changes": changes,
        "risks": [
            "Records between the old and the new offset are skipped (never processed) when moving forward, "
            "or processed again when moving back.",
            "A consumer of this group that starts before the reset finishes may commit over it "
            "(the execution re-checks that the group is empty right before committing).",
        ],
        "rollback": {
            "how": ("Trigger runbook_stuck_reset with target 'restore' and the previous offsets "
                    "(or fleetctl audit rollback RECORD_ID)." if previous else
                    "The group had no committed offsets before: there is nothing to restore."),
            "dag_id": DAG_ID, "conf": rollback_conf if previous else None,
        },
        "details": {"group": group, "topic": topic, "target": tgt.describe(), "partitions": rows,
                    "group_state": desc.state, "members": len(desc.members)},
        # what the execution's precondition check would refuse if approved as things are now
        "refused_now": refused_now,
    }


def live_members(group: str, desc) -> str | None:
    """"group 'g' is Stable with 2 live member(s) (clients: a, b)" when the described group has live
    members (an offset reset needs it Empty or Dead), else None: the plan and the execution's check
    say it alike."""
    if not desc.members and desc.state in EMPTY_STATES:
        return None
    clients = ", ".join(sorted({m.client_id for m in desc.members})) or "none listed"
    return f"group {group!r} is {desc.state} with {len(desc.members)} live member(s) (clients: {clients})"


# -- the stuck-partition runbook: diagnosis, then a skip plan ---------------------------------------
def diagnose_partition(kafka: KafkaCluster, root: DataRoot, cluster: str, group: str, topic: str, partition: int,
                       window: dt.timedelta = stuck.DEFAULT_WINDOW, open_record_reader=None) -> dict:
    """`open_record_reader`: opens another KafkaCluster (the runbook principal's) to read the record
    at the committed offset when `kafka`'s principal is refused the topic (closed after)."""
    since = (utcnow() - dt.timedelta(days=2)).date()
    rows = [r for r in read_dataset(root, "offsets_snapshots", cluster, since=since).to_pylist()
            if r["group"] == group and r["topic"] == topic and r["partition"] == partition
            and (r.get("source") or "kafka") == "kafka"]  # a ZooKeeper-stored group of that name is another
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
        if (record or {}).get("error") == "TOPIC_AUTHORIZATION_FAILED" and open_record_reader is not None:
            # the read-only principal may not read the topic (on 0.9 that right, with Read on the
            # group, would let it commit): the runbook's own principal reads the record's metadata
            other = open_record_reader()
            try:
                record = other.record_at(topic, partition, committed)
                if record is not None and "error" not in record:
                    record["read_as"] = other.principal
            finally:
                other.close()
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
                   f"offset {rec.get('offset')}, {_record_time(rec.get('timestamp'))}, key {rec.get('key')}, "
                   f"{rec.get('size')} bytes"
                   + (f" (read as {rec['read_as']}: the read-only principal may not read the topic)"
                      if rec.get("read_as") else "")
                   if "error" not in rec else f"not readable: {rec['error']}")},
    ]


def build_skip_plan(kafka: KafkaCluster, root: DataRoot, cluster: str, group: str, topic: str, partition: int,
                    skip: int = 1, window: dt.timedelta = stuck.DEFAULT_WINDOW, open_record_reader=None) -> dict:
    """Diagnose the partition, then plan 'skip N records' for its group (the poison-record fix)."""
    d = diagnose_partition(kafka, root, cluster, group, topic, partition, window, open_record_reader)
    plan = build_plan(kafka, cluster, group, topic, str(partition), f"skip {skip}")
    plan["title"] = (f"Skip {skip} record(s) of {topic}-{partition} for group "
                     f"{group} (stuck at offset {d['committed_offset']}, {d['status']})")
    plan["evidence"] = evidence_items(d)
    plan["details"]["diagnosis"] = d
    return plan


def _record_time(ms) -> str:
    """A record's timestamp for a person: UTC with its epoch milliseconds (0.9 records have none)."""
    if not isinstance(ms, int) or ms < 0:
        return "no timestamp"
    try:
        when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return f"timestamp {ms} (out of range)"
    return f"timestamp {when.replace('+00:00', 'Z')} ({ms})"
