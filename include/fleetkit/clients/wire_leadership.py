"""Partition reassignments on the wire, for clusters without ZooKeeper (KRaft).

confluent-kafka 2.x has no AlterPartitionReassignments / ListPartitionReassignments admin call,
so this module asks them on the toolkit's protocol layer (fleetkit.clients.protocol):

* AlterPartitionReassignments v0: set a partition's replica list (the order is the preference
  order; a reordering of the same set moves no data). Answered per partition.
* ListPartitionReassignments v0: the reassignments in progress.

Version 0 is spoken when the broker's ApiVersions answer offers it (Kafka 2.4 and later; 4.3.1
still does). A KRaft broker forwards both to the active controller, so any broker will do; a
ZooKeeper-mode broker answers NOT_CONTROLLER unless it is the controller, which is why
ZooKeeper-mode clusters keep using the /admin znodes (fleetkit.clients.leadership).
"""

from __future__ import annotations

from fleetkit.clients.protocol import messages as m
from fleetkit.clients.protocol.messages import Api
from fleetkit.clients.protocol.schema import error_name, utf8
from fleetkit.clients.protocol.transport import Broker, ask_first


class ReassignmentError(ConnectionError):
    """The cluster refused or could not be asked; `error` is Kafka's error name when it answered."""

    def __init__(self, message: str, error: str | None = None):
        super().__init__(message)
        self.error = error


def _problem(code: int, message: str | None) -> str | None:
    return f"{error_name(code)}: {message}" if code else None


def alter_request(timeout_ms: int, topic: str, moves: dict[int, list[int] | None]) -> dict:
    """One topic, {partition: replicas} (None cancels a reassignment in progress)."""
    return {"TimeoutMs": timeout_ms, "Topics": [{"Name": topic, "Partitions": [
        {"PartitionIndex": p, "Replicas": None if r is None else list(r)} for p, r in sorted(moves.items())]}]}


def alter_problems(answer: dict) -> tuple[str | None, dict[tuple[str, int], str | None]]:
    """(the request's error with its message, {(topic, partition): error with message or None})."""
    return _problem(answer["ErrorCode"], answer["ErrorMessage"]), {
        (t["Name"], p["PartitionIndex"]): _problem(p["ErrorCode"], p["ErrorMessage"])
        for t in answer["Responses"] for p in t["Partitions"]}


def in_progress(answer: dict) -> tuple[str | None, dict[tuple[str, int], dict]]:
    """(error with message, {(topic, partition): {"replicas", "adding", "removing"}})."""
    return _problem(answer["ErrorCode"], answer["ErrorMessage"]), {
        (t["Name"], p["PartitionIndex"]): {"replicas": p["Replicas"], "adding": p["AddingReplicas"],
                                           "removing": p["RemovingReplicas"]}
        for t in answer["Topics"] for p in t["Partitions"]}


def _ask(bootstrap: str, api: Api, values: dict, timeout: float, security=None) -> dict:
    """One request to the first bootstrap server that offers version 0 of it."""
    def ask(broker: Broker) -> dict:
        if broker.versions is None or api.pick_version(broker.versions) is None:
            offered = (broker.versions or {}).get(api.key)
            raise ReassignmentError(f"broker {broker.host}:{broker.port} does not offer {api.name} v0 "
                                    f"(offers {offered or 'none'}): Kafka 2.4 or later is needed")
        return broker.call(api, 0, values)

    return ask_first(bootstrap, api.name, ask, timeout, error=ReassignmentError, security=security)


def alter_replicas(bootstrap: str, topic: str, partition: int, replicas: list[int], timeout: float = 30.0,
                   security=None) -> None:
    """Ask the controller to set `replicas` (in this order) for topic-partition; raises
    ReassignmentError with the broker's error when refused. Returns once accepted: the caller
    waits for the metadata to show the new order."""
    utf8(topic, "topic name")
    err, parts = alter_problems(_ask(bootstrap, m.ALTER_PARTITION_REASSIGNMENTS,
                                     alter_request(int(timeout * 1000), topic, {partition: list(replicas)}), timeout,
                                     security))
    problem = err or parts.get((topic, partition), "NO_ANSWER for the partition")
    if problem:
        raise ReassignmentError(f"reassigning {topic}-{partition} to replicas {list(replicas)} was refused: {problem}",
                                error=problem.split(":", 1)[0])


def reassignments(bootstrap: str, timeout: float = 30.0, security=None) -> dict[tuple[str, int], dict]:
    """The partition reassignments in progress: {(topic, partition): {"replicas", "adding", "removing"}}."""
    err, out = in_progress(_ask(bootstrap, m.LIST_PARTITION_REASSIGNMENTS, {"TimeoutMs": int(timeout * 1000),
                                                                            "Topics": None}, timeout, security))
    if err:
        raise ReassignmentError(f"listing partition reassignments failed: {err}", error=err.split(":", 1)[0])
    return out
