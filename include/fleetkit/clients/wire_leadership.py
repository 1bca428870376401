"""Partition reassignments on the wire, for clusters without ZooKeeper (KRaft).

confluent-kafka 2.x has no AlterPartitionReassignments / ListPartitionReassignments admin call,
so this module speaks them over plain TCP with fleetkit.clients.wire_codec's primitives:

* AlterPartitionReassignments (API key 45) v0: set a partition's replica list (the order is
  the preference order; a reordering of the same set moves no data). Answered per partition.
* ListPartitionReassignments (API key 46) v0: the reassignments in progress.

Both are flexible in every version (request header v2, response header v1, compact strings and
arrays, tagged fields). Version 0 is spoken when the broker's ApiVersions answer offers it (Kafka
2.4 and later; 4.3.1 still does). A KRaft broker forwards both to the active controller, so any
broker will do; a ZooKeeper-mode broker answers NOT_CONTROLLER unless it is the controller, which
is why ZooKeeper-mode clusters keep using the /admin znodes (fleetkit.clients.leadership).
Schemas: Kafka's clients/src/main/resources/common/message/{Alter,List}PartitionReassignments*.json.
"""

from __future__ import annotations

import struct

from fleetkit.clients import wire
from fleetkit.clients import wire_codec as codec

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46
NAMES = {ALTER_REASSIGNMENTS: "AlterPartitionReassignments", LIST_REASSIGNMENTS: "ListPartitionReassignments"}
VERSION = 0


class ReassignmentError(ConnectionError):
    """The cluster refused or could not be asked; `error` is Kafka's error name when it answered."""

    def __init__(self, message: str, error: str | None = None):
        super().__init__(message)
        self.error = error


def _request(api_key: int, correlation_id: int, body: bytes) -> bytes:
    """Request header v2 (flexible: client id as int16 string, then empty tags) and `body`."""
    return codec.encode_request(api_key, VERSION, correlation_id, body, flexible=True)


def alter_body(timeout_ms: int, topic: str, moves: dict[int, list[int] | None]) -> bytes:
    """One topic, {partition: replicas} (None cancels a reassignment in progress)."""
    parts = b""
    for p, replicas in sorted(moves.items()):
        parts += struct.pack(">i", p)
        if replicas is None:
            parts += codec.uvarint(0)
        else:
            parts += codec.array_len(len(replicas), True) + b"".join(struct.pack(">i", b) for b in replicas)
        parts += codec.NO_TAGS
    topics = (codec.array_len(1, True) + codec.string(topic, True) + codec.array_len(len(moves), True) + parts
              + codec.NO_TAGS)
    return struct.pack(">i", timeout_ms) + topics + codec.NO_TAGS


def list_body(timeout_ms: int) -> bytes:
    """Every reassignment in progress (topics null)."""
    return struct.pack(">i", timeout_ms) + codec.uvarint(0) + codec.NO_TAGS


def decode_alter(payload: bytes) -> tuple[str | None, dict[tuple[str, int], str | None]]:
    """(the request's error with its message, {(topic, partition): error with message or None})."""
    _, r = codec.response_reader(payload, True)
    r.int32()  # throttle time
    err, msg = r.int16(), r.string(True)
    out = {}
    for _ in range(r.array_len(True)):
        topic = r.string(True) or ""
        for _ in range(r.array_len(True)):
            p, perr, pmsg = r.int32(), r.int16(), r.string(True)
            r.skip_tags()
            out[(topic, p)] = f"{codec.error_name(perr)}: {pmsg}" if perr else None
        r.skip_tags()
    r.skip_tags()
    return (f"{codec.error_name(err)}: {msg}" if err else None), out


def decode_list(payload: bytes) -> tuple[str | None, dict[tuple[str, int], dict]]:
    """(error with message, {(topic, partition): {"replicas", "adding", "removing"}})."""
    _, r = codec.response_reader(payload, True)
    r.int32()  # throttle time
    err, msg = r.int16(), r.string(True)
    out = {}
    for _ in range(r.array_len(True)):
        topic = r.string(True) or ""
        for _ in range(r.array_len(True)):
            p = r.int32()
            lists = [[r.int32() for _ in range(r.array_len(True))] for _ in range(3)]
            r.skip_tags()
            out[(topic, p)] = {"replicas": lists[0], "adding": lists[1], "removing": lists[2]}
        r.skip_tags()
    r.skip_tags()
    return (f"{codec.error_name(err)}: {msg}" if err else None), out


def _ask(bootstrap: str, api_key: int, body: bytes, timeout: float, security=None) -> bytes:
    """Send one request to the first bootstrap server that offers version 0 of it."""
    def ask(broker: wire._Broker) -> bytes:
        offered = (broker.versions or {}).get(api_key)
        if offered is None or not offered[0] <= VERSION <= offered[1]:
            raise ReassignmentError(f"broker {broker.host}:{broker.port} does not offer {NAMES[api_key]} v{VERSION} "
                                    f"(offers {offered or 'none'}): Kafka 2.4 or later is needed")
        broker.conn.send(_request(api_key, 1, body))
        return broker.conn.payload()

    return wire.ask_first(bootstrap, NAMES[api_key], ask, timeout, error=ReassignmentError, security=security)


def alter_replicas(bootstrap: str, topic: str, partition: int, replicas: list[int], timeout: float = 30.0,
                   security=None) -> None:
    """Ask the controller to set `replicas` (in this order) for topic-partition; raises
    ReassignmentError with the broker's error when refused. Returns once accepted: the caller
    waits for the metadata to show the new order."""
    codec.utf8(topic, "topic name")
    err, parts = decode_alter(_ask(bootstrap, ALTER_REASSIGNMENTS,
                                   alter_body(int(timeout * 1000), topic, {partition: list(replicas)}), timeout,
                                   security))
    problem = err or parts.get((topic, partition), "NO_ANSWER for the partition")
    if problem:
        raise ReassignmentError(f"reassigning {topic}-{partition} to replicas {list(replicas)} was refused: {problem}",
                                error=problem.split(":", 1)[0])


def reassignments(bootstrap: str, timeout: float = 30.0, security=None) -> dict[tuple[str, int], dict]:
    """The partition reassignments in progress: {(topic, partition): {"replicas", "adding", "removing"}}."""
    err, out = decode_list(_ask(bootstrap, LIST_REASSIGNMENTS, list_body(int(timeout * 1000)), timeout, security))
    if err:
        raise ReassignmentError(f"listing partition reassignments failed: {err}", error=err.split(":", 1)[0])
    return out
