"""Executing an offset reset: the plan's preconditions re-checked right before acting (the group
still has no live members, its committed offsets are still those planned), then the change,
journaled (intent before, outcome after) so a failed change leaves which partitions moved.

The mechanism depends on the cluster: the Admin API's AlterConsumerGroupOffsets where the brokers
answer ApiVersions (0.10+: 3.9, 4.x), a plain offset commit outside the group on 0.9. MECHANISMS maps
a name to its function; mechanism_for picks one (another offset store adds an entry there)."""

from __future__ import annotations

import logging
import os

from fleetkit.clients.kafka import KafkaCluster
from fleetkit.core.errors import FleetError
from fleetkit.core.journal import Journal
from fleetkit.stuck.plan import live_members

log = logging.getLogger(__name__)


def check_preconditions(kafka: KafkaCluster, plan: dict) -> list[str]:
    """What no longer holds (empty: safe to execute)."""
    d = plan["details"]
    group, topic = d["group"], d["topic"]
    problems = []
    desc = kafka.describe_groups([group])[group]
    if desc.error:
        problems.append(f"group {group!r} could not be described ({desc.error})")
    elif live := live_members(group, desc):
        problems.append(f"{live}; it must be Empty or Dead")
    expected = next(p for p in plan["preconditions"] if p["check"] == "committed_unchanged")["expected"]
    now = kafka.group_offsets(group, [(topic, int(p)) for p in expected])
    for p, before in expected.items():
        current = now.get((topic, int(p)))
        if current != before:
            problems.append(f"committed offset of {topic}-{p} changed since the plan: {before} -> {current}")
    return problems


COMMIT_SEQ = 0  # the journal's change number of the one commit request (every planned partition)


def _alter(kafka: KafkaCluster, group: str, offsets: dict) -> None:
    kafka.alter_offsets(group, offsets)


def _commit(kafka: KafkaCluster, group: str, offsets: dict) -> None:
    kafka.commit_offsets(group, offsets)


#: how a reset changes a group's offsets: name -> fn(kafka, group, {(topic, partition): offset})
MECHANISMS = {"alter_offsets": _alter, "commit_offsets": _commit}


def mechanism_for(kafka: KafkaCluster) -> str:
    """alter_offsets (Admin API) for brokers answering ApiVersions, commit_offsets for 0.9's."""
    return "alter_offsets" if kafka.asks_api_versions else "commit_offsets"


def execute(kafka: KafkaCluster, plan: dict, journal_path: str | os.PathLike | None = None) -> dict:
    """Commit the planned offsets in one request, journaled at journal_path (core.journal) as one
    change listing every partition: intent (before -> after) before the commit, outcome after. When
    the commit fails, the offsets are read back and the outcome says which partitions moved."""
    d = plan["details"]
    group, topic = d["group"], d["topic"]
    changes = [{"partition": r["partition"], "before": r["committed"], "after": r["new"]} for r in d["partitions"]]
    offsets = {(topic, c["partition"]): c["after"] for c in changes}
    mechanism = mechanism_for(kafka)
    log.info("reset of group %r on topic %r: %d partition(s) through %s", group, topic, len(changes), mechanism)
    with Journal(journal_path) as j:
        moved: dict = {}

        def read_back(e: BaseException) -> dict:  # the failed outcome says which partitions moved
            moved.update(_moved(kafka, group, topic, changes))
            return moved

        try:
            j.step(COMMIT_SEQ, lambda: MECHANISMS[mechanism](kafka, group, offsets) and None, on_error=read_back,
                   op=mechanism, group=group, topic=topic, partitions=changes)
        except Exception as e:
            raise ResetFailed(
                f"reset of group {group!r} on topic {topic!r} failed ({e}); read back after the failure: "
                f"moved {_names(topic, moved['moved'])}, not moved {_names(topic, moved['not_moved'])}, "
                f"unknown {_names(topic, moved['unknown'])}"
                + (f"; journal {journal_path}" if journal_path else "")) from e
    return {"group": group, "topic": topic, "changes": changes, "mechanism": mechanism}


class ResetFailed(FleetError):
    """The commit of a reset failed; the message says which partitions moved."""


def _moved(kafka: KafkaCluster, group: str, topic: str, changes: list[dict]) -> dict:
    """Split the planned changes by what the group's committed offsets read back now: moved (at the
    new offset), not_moved (still at the old one), unknown (unreadable, or at neither)."""
    out = {"moved": [], "not_moved": [], "unknown": []}
    try:
        now = kafka.group_offsets(group, [(topic, c["partition"]) for c in changes])
    except Exception as e:  # noqa: BLE001 - the account must be written whatever the cluster answers
        log.error("reset of group %r: offsets not readable after the failed commit (%s)", group, e)
        now = None
    for c in changes:
        current = None if now is None else now.get((topic, c["partition"]))
        if now is not None and current == c["after"] and c["after"] != c["before"]:
            out["moved"].append(c)
        elif now is not None and current == c["before"]:
            out["not_moved"].append(c)
        else:
            out["unknown"].append({**c, "reads_back": current})
    return out


def _names(topic: str, changes: list[dict]) -> str:
    return "[" + ", ".join(f"{topic}-{c['partition']}" for c in changes) + "]"
