"""Planning a consumer group's offset reset, and the diagnosis of a stuck partition.

The fix for a consumer stuck on a poison record: with the group stopped (no live members), move
its committed offset past the record (``skip 1``), or to the log start / end, or to an offset.

Targets, with kafka-consumer-groups' reset options beside them: ``earliest`` (--to-earliest) |
``latest`` (--to-latest) | ``offset N`` (--to-offset) | ``skip N`` (N records forward from the
committed offset, refused past the log end) | ``shift N`` (--shift-by: N forward or back from the
committed offset, kept within the log as Kafka's tool does) | ``datetime T`` (--to-datetime: the
first record at or after T, ISO 8601, UTC unless it says otherwise; the log end when none is that
new) | ``duration D`` (--by-duration: the same, T = now - D, D like 2h or PT2H) | ``restore``
(explicit per-partition offsets: rollbacks, and a plan of kafka-consumer-groups' CSV).

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
    kind: str  # earliest | latest | offset | skip | shift | datetime | duration | restore
    value: int | None = None  # offset, skip, shift: records; datetime: epoch ms; duration: ms back from now
    offsets: dict | None = None
    text: str = ""  # datetime / duration as given

    def describe(self) -> str:
        if self.kind in ("offset", "skip", "shift"):
            return f"{self.kind} {self.value}"
        if self.kind in ("datetime", "duration"):
            return f"{self.kind} {self.text}"
        return self.kind

    def at_ms(self, now: dt.datetime) -> int | None:
        """datetime / duration: the time whose first record is the new offset (epoch ms)."""
        if self.kind == "datetime":
            return self.value
        if self.kind == "duration":
            return int(now.timestamp() * 1000) - self.value
        return None


_TARGET = re.compile(r"^\s*(earliest|latest|restore|offset\s+(-?\d+)|skip\s+(-?\d+)|shift\s+([-+]?\d+)"
                     r"|datetime\s+(\S+)|duration\s+(\S+))\s*$", re.I)
_ISO_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.I)
TARGETS_TEXT = "earliest, latest, offset N, skip N, shift N, datetime T, duration D, restore"


def _epoch_ms(text: str) -> int:
    """ISO 8601 (2026-11-29T10:00:00, with Z or an offset; UTC when it says none) -> epoch ms."""
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ResetError(f"target datetime {text!r}: not an ISO 8601 time like 2026-11-29T10:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


def _duration_ms(text: str) -> int:
    """'2h', '90m', '1d' or ISO 8601's 'PT2H', 'P1DT6H' -> milliseconds (positive)."""
    m = _ISO_DURATION.match(text)
    if m and any(m.groups()):
        d, h, mi, s = (float(x or 0) for x in m.groups())
        ms = int(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000)
    else:
        from fleetkit.core.durations import parse_duration_seconds

        try:
            ms = int(parse_duration_seconds(text) * 1000)
        except ValueError:
            raise ResetError(f"target duration {text!r}: not a duration like 2h, 90m or PT2H") from None
    if ms <= 0:
        raise ResetError(f"target duration {text!r}: must be longer than zero")
    return ms


def parse_target(target: str, offsets: dict | None = None) -> Target:
    m = _TARGET.match(str(target or ""))
    if not m:
        raise ResetError(f"target {target!r} is not one of: {TARGETS_TEXT}")
    word = m.group(1).split()[0].lower()
    if word == "shift":
        n = int(m.group(4))
        if n == 0:
            raise ResetError(f"target {target!r}: shift by a number of records other than 0")
        return Target("shift", n)
    if word == "datetime":
        return Target("datetime", _epoch_ms(m.group(5)), text=m.group(5))
    if word == "duration":
        return Target("duration", _duration_ms(m.group(6)), text=m.group(6))
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


def plan_csv(plan: dict) -> str:
    """A reset plan's new offsets in kafka-consumer-groups' CSV (--export, read back by
    --from-file): topic,partition,offset per line."""
    topic = plan["details"]["topic"]
    return "".join(f"{topic},{r['partition']},{r['new']}\n" for r in plan["details"]["partitions"])


def offsets_from_csv(text: str, group: str, topic: str) -> dict[str, int]:
    """kafka-consumer-groups' CSV (topic,partition,offset; with several groups group,topic,partition,
    offset) -> the `offsets` param of target restore, for `group` and `topic`. ResetError naming the
    line for anything else (another topic or group, a bad number, a partition twice)."""
    out: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4:
            if cells[0] != group:
                raise ResetError(f"CSV line {n}: group {cells[0]!r}, not {group!r}")
            cells = cells[1:]
        if len(cells) != 3:
            raise ResetError(f"CSV line {n}: {len(cells)} fields; write topic,partition,offset")
        if cells[0] != topic:
            raise ResetError(f"CSV line {n}: topic {cells[0]!r}, not {topic!r} (one topic per reset)")
        try:
            partition, offset = int(cells[1]), int(cells[2])
        except ValueError:
            raise ResetError(f"CSV line {n}: partition and offset must be numbers") from None
        if partition < 0 or offset < 0:
            raise ResetError(f"CSV line {n}: partition and offset cannot be negative")
        if str(partition) in out:
            raise ResetError(f"CSV line {n}: partition {partition} given twice")
        out[str(partition)] = offset
    if not out:
        raise ResetError("the CSV holds no offsets")
    return out


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


def offsets_at_time(kafka: KafkaCluster, cluster: str, target: Target,
                    partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    """For a datetime / duration target: each partition's offset of its first record at or after
    the time ({} for the other targets). Refused on a cluster before 0.10 (no record timestamps)."""
    at_ms = target.at_ms(utcnow())
    if at_ms is None:
        return {}
    if not kafka.asks_api_versions:
        raise ResetError(f"target {target.describe()!r}: cluster {cluster!r} runs Kafka before 0.10, whose records "
                         "carry no timestamps; use offset N, skip N or shift N")
    return kafka.offsets_for_times(partitions, at_ms)


def new_offset(target: Target, partition: int, committed: int | None, start: int, end: int,
               at_time: int | None = None) -> int:
    """The partition's new offset; `at_time`: for datetime / duration, the offset of the first record
    at or after the time (None: no record that new, so the log end)."""
    if target.kind == "earliest":
        return start
    if target.kind == "latest":
        return end
    if target.kind in ("datetime", "duration"):
        return end if at_time is None else min(max(at_time, start), end)
    if target.kind == "shift":  # kept within the log, as kafka-consumer-groups --shift-by does
        if committed is None:
            raise ResetError(f"partition {partition}: the group has no committed offset to shift from")
        return min(max(committed + target.value, start), end)
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
    by_time = offsets_at_time(kafka, cluster, tgt, tps)
    committed = kafka.group_offsets(group, tps)
    logs = kafka.log_offsets(tps)
    desc = kafka.describe_groups([group])[group]
    changes, rows = [], []
    for (t, p) in tps:
        start, end, err = logs[(t, p)]
        if err or start is None or end is None:
            raise ResetError(f"partition {t}-{p}: log offsets not readable ({err})")
        before = committed.get((t, p))
        after = new_offset(tgt, p, before, start, end, by_time.get((t, p)))
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
