"""Executing an offset reset: the plan's preconditions re-checked right before acting (the group
still has no live members, its committed offsets are still those planned), then the commit."""

from __future__ import annotations

from fleetkit.clients.kafka import KafkaCluster
from fleetkit.stuck.plan import EMPTY_STATES


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
