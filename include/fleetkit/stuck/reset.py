"""Reset a consumer group's committed offsets: plan, preconditions, execute, verify.

The fix for a consumer stuck on a poison record: with the group stopped (no live members), move
its committed offset past the record (``skip 1``), or to the log start / end, or to an offset.

Targets: ``earliest`` | ``latest`` | ``offset N`` | ``skip N`` (N records forward from the
committed offset) | ``restore`` (explicit per-partition offsets, used by rollbacks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetkit.core.datasets import iso_z, utcnow
from fleetkit.core.errors import FleetError
from fleetkit.clients.kafka import KafkaCluster

ACTION = "reset_offsets"
DAG_ID = "runbook_reset_offsets"
EMPTY_STATES = ("Empty", "Dead")


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
            {"check": "committed_unchanged", "what": "the committed offsets are still those shown below",
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
            "how": ("Trigger runbook_reset_offsets with target 'restore' and the previous offsets "
                    "(or fleetctl audit rollback RECORD_ID)." if previous else
                    "The group had no committed offsets before: there is nothing to restore."),
            "dag_id": DAG_ID, "conf": rollback_conf if previous else None,
        },
        "details": {"group": group, "topic": topic, "target": tgt.describe(), "partitions": rows,
                    "group_state": desc.state, "members": len(desc.members)},
    }


def check_preconditions(kafka: KafkaCluster, plan: dict) -> list[str]:
    """What no longer holds (empty: safe to execute)."""
    d = plan["details"]
    group, topic = d["group"], d["topic"]
    problems = []
    desc = kafka.describe_groups([group])[group]
    if desc.error:
        problems.append(f"group {group!r} could not be described ({desc.error})")
    elif desc.members or desc.state not in EMPTY_STATES:
        clients = ", ".join(sorted({m.client_id for m in desc.members})) or "none listed"
        problems.append(f"group {group!r} is {desc.state} with {len(desc.members)} live member(s) "
                        f"(clients: {clients}); it must be Empty or Dead")
    expected = next(p for p in plan["preconditions"] if p["check"] == "committed_unchanged")["expected"]
    now = kafka.group_offsets(group, [(topic, int(p)) for p in expected])
    for p, before in expected.items():
        current = now.get((topic, int(p)))
        if current != before:
            problems.append(f"committed offset of {topic}-{p} changed since the plan: {before} -> {current}")
    return problems


def execute(kafka: KafkaCluster, plan: dict) -> dict:
    d = plan["details"]
    offsets = {(d["topic"], r["partition"]): r["new"] for r in d["partitions"]}
    kafka.commit_offsets(d["group"], offsets)
    return {"group": d["group"], "topic": d["topic"],
            "changes": [{"partition": r["partition"], "before": r["committed"], "after": r["new"]}
                        for r in d["partitions"]]}


def verify(kafka: KafkaCluster, plan: dict) -> list[str]:
    d = plan["details"]
    now = kafka.group_offsets(d["group"], [(d["topic"], r["partition"]) for r in d["partitions"]])
    return [f"{d['topic']}-{r['partition']}: expected {r['new']}, reads back {now.get((d['topic'], r['partition']))}"
            for r in d["partitions"] if now.get((d["topic"], r["partition"])) != r["new"]]
