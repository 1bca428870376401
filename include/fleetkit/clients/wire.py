"""Ask the cluster who coordinates a group, and ask that broker itself.

confluent-kafka hides the coordinator lookup: when DescribeGroups fails (NOT_COORDINATOR while a
partition loads, say) it reports the error but not which broker it asked, which is exactly what an
ownership check needs. So this module asks, on the toolkit's own protocol layer
(fleetkit.clients.protocol: the messages as declared there, over its transport):

* FindCoordinator: any broker names the coordinator of a group (node id, host, port) or answers
  an error (COORDINATOR_NOT_AVAILABLE when the partition has no leader). From v4 one request
  carries many groups.
* DescribeGroups, sent to that named broker: the broker's own answer for the group (state and
  members with their consumer-protocol assignments, or NOT_COORDINATOR /
  COORDINATOR_LOAD_IN_PROGRESS). v6 is not spoken: it answers GROUP_ID_NOT_FOUND for unknown
  groups where v0-v5 say Dead.
* ConsumerGroupDescribe, for the groups DescribeGroups does not know (KIP-848 groups, Kafka 4).
* Metadata v7+ (leader epochs): partition leaders for clusters without ZooKeeper (KRaft).

Requests are pipelined on one connection per broker, so a thousand groups cost a few round
trips. Connections speak the listener's security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
SASL_SSL with PLAIN or SCRAM: fleetkit.clients.wire_security, from the connection's librdkafka
settings); for other SASL mechanisms (GSSAPI, OAUTHBEARER) `supported()` is False and callers use
the admin client's describe instead.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable

from fleetkit.clients import wire_security
from fleetkit.clients.protocol import messages as m
from fleetkit.clients.protocol.schema import Reader, decode_from, error_name, utf8
from fleetkit.clients.protocol.transport import Broker, ask_first

UNREACHABLE = "COORDINATOR_UNREACHABLE"  # the named coordinator did not answer at all
UNSUPPORTED = "UNSUPPORTED_VERSION"      # the broker accepts none of the versions spoken here
#: Metadata is asked from v7, the first with leader epochs (what ZooKeeper's partition state gives
#: on ZooKeeper-mode clusters)
LEADER_EPOCHS_FROM = 7
#: FindCoordinator v4 carries many keys in one request
BATCHED_FIND_FROM = 4
KEY_TYPE_GROUP = 0


def supported(config: dict) -> bool:
    """True when the wire client can speak the config's security protocol and SASL mechanism."""
    return wire_security.supported(config)


@dataclass
class Answer:
    """What the cluster says about one group."""

    group: str
    coordinator_id: int | None = None   # who the lookup names
    coordinator: str | None = None      # its host:port
    lookup_error: str | None = None
    describe_error: str | None = None   # what the named coordinator itself answered
    state: str | None = None
    members: list[tuple[str, str, str]] = field(default_factory=list)  # (member_id, client_id, client_host)
    described: tuple[GroupMember, ...] = ()  # the members as described, with their assignments
    group_type: str | None = None       # "consumer" when ConsumerGroupDescribe described it (KIP-848)
    group_epoch: int | None = None      # KIP-848 groups: the group epoch
    assignor: str | None = None         # the assignment strategy (classic: the protocol) the group uses

    @property
    def error(self) -> str | None:
        return self.lookup_error or self.describe_error


@dataclass(frozen=True)
class Coordinator:
    """One key of a FindCoordinator answer."""

    key: str
    error: int
    node_id: int
    host: str | None
    port: int


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: (topic, partition) pairs of a consumer-protocol member's assignment, sorted; None when the
    #: broker sent none (the group is rebalancing, or it is not a consumer group)
    assignment: tuple[tuple[str, int], ...] | None = None
    #: KIP-848 members: the member's epoch (below the group epoch while it reconciles); None for classic
    member_epoch: int | None = None


@dataclass(frozen=True)
class DescribedGroup:
    """One group of a DescribeGroups answer."""

    error: int
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...]


@dataclass(frozen=True)
class ConsumerGroup:
    """One group of a ConsumerGroupDescribe answer (KIP-848)."""

    error: int
    group: str
    state: str
    group_epoch: int
    assignment_epoch: int
    members: tuple[GroupMember, ...]
    assignor: str = ""


@dataclass(frozen=True)
class PartitionLeader:
    """One partition of a Metadata answer."""

    topic: str
    partition: int
    error: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


# -- answers ----------------------------------------------------------------------------------
def decode_consumer_assignment(data: bytes | None) -> tuple[tuple[str, int], ...] | None:
    """The (topic, partition) pairs of a ConsumerProtocolAssignment (any version: later versions
    only append fields), sorted; None for empty or unreadable bytes."""
    if not data:
        return None
    try:
        r = Reader(data)
        r.int16()  # version
        answer = decode_from(r, m.CONSUMER_PROTOCOL_ASSIGNMENT, 0, False)  # v0's fields
    except struct.error:
        return None
    return tuple(sorted((t["Topic"], p) for t in answer["AssignedPartitions"] for p in t["Partitions"]))


def coordinators(version: int, answer: dict, keys: list[str]) -> list[Coordinator]:
    """One Coordinator per key of a FindCoordinator answer; before v4 the answer names no key and
    is for the single key asked (`keys`)."""
    if version >= BATCHED_FIND_FROM:
        return [Coordinator(c["Key"], c["ErrorCode"], c["NodeId"], c["Host"], c["Port"]) for c in answer["Coordinators"]]
    return [Coordinator(keys[0], answer["ErrorCode"], answer["NodeId"], answer["Host"], answer["Port"])]


def described_groups(answer: dict) -> list[DescribedGroup]:
    return [DescribedGroup(g["ErrorCode"], g["GroupId"], g["GroupState"], g["ProtocolType"], g["ProtocolData"], tuple(
        GroupMember(mb["MemberId"], mb["GroupInstanceId"], mb["ClientId"], mb["ClientHost"],
                    decode_consumer_assignment(mb["MemberAssignment"]) if g["ProtocolType"] == "consumer" else None)
        for mb in g["Members"])) for g in answer["Groups"]]


def _assigned(assignment: dict) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((t["TopicName"], p) for t in assignment["TopicPartitions"] for p in t["Partitions"]))


def consumer_groups(answer: dict) -> list[ConsumerGroup]:
    """The groups of a ConsumerGroupDescribe answer (KIP-848)."""
    return [ConsumerGroup(g["ErrorCode"], g["GroupId"], g["GroupState"], g["GroupEpoch"], g["AssignmentEpoch"], tuple(
        GroupMember(mb["MemberId"], mb["InstanceId"], mb["ClientId"], mb["ClientHost"], _assigned(mb["Assignment"]),
                    member_epoch=mb["MemberEpoch"]) for mb in g["Members"]), g["AssignorName"])
            for g in answer["Groups"]]


def metadata(answer: dict) -> tuple[dict[int, str], dict[str, int], list[PartitionLeader]]:
    """({broker id: host:port}, {topic: error code} of topics answered with an error, partitions)
    of a Metadata answer (leader epochs -1 before v7)."""
    brokers = {b["NodeId"]: f"{b['Host']}:{b['Port']}" for b in answer["Brokers"]}
    errors = {t["Name"]: t["ErrorCode"] for t in answer["Topics"] if t["ErrorCode"]}
    parts = [PartitionLeader(t["Name"], p["PartitionIndex"], p["ErrorCode"], p["LeaderId"], p["LeaderEpoch"],
                             tuple(p["ReplicaNodes"]), tuple(p["IsrNodes"]))
             for t in answer["Topics"] for p in t["Partitions"]]
    return brokers, errors, parts


def find_request(version: int, keys: list[str]) -> dict:
    """A FindCoordinator request for groups: one key up to v3, many from v4."""
    if version < BATCHED_FIND_FROM and len(keys) != 1:
        raise ValueError(f"FindCoordinator v{version} carries exactly one key, not {len(keys)}")
    return {"Key": keys[0], "KeyType": KEY_TYPE_GROUP, "CoordinatorKeys": keys}


def metadata_request(topics: list[str]) -> dict:
    """The named topics, never auto-created (v4+; v0 creates a missing topic when the broker
    auto-creates topics), no authorized operations."""
    for t in topics:
        utf8(t, "topic name")
    return {"Topics": [{"Name": t} for t in topics], "AllowAutoTopicCreation": False}


# -- questions --------------------------------------------------------------------------------
def partition_leaders(bootstrap: str, topics: Iterable[str], timeout: float = 10.0,
                      api_versions: bool = True, security=None) -> tuple[list[PartitionLeader], dict[str, str]] | None:
    """(partitions with leader, leader epoch, replicas and ISR, {topic: error name}) of `topics`
    from the first bootstrap server that answers; topics are never auto-created. None when that
    broker speaks no Metadata version with leader epochs (before Kafka 1.0)."""
    topics = sorted(set(topics))

    def ask(broker: Broker):
        version = broker.version(m.METADATA, LEADER_EPOCHS_FROM) if broker.versions is not None else None
        if version is None:
            return None
        _, errors, parts = metadata(broker.call(m.METADATA, version, metadata_request(topics)))
        return parts, {t: error_name(e) or "" for t, e in errors.items()}

    return ask_first(bootstrap, "a metadata request", ask, timeout, api_versions, security=security)


def _find_coordinators(broker: Broker, groups: list[str], answers: dict[str, Answer]) -> None:
    version = broker.version(m.FIND_COORDINATOR)
    if version is None:
        for g in groups:
            answers[g].lookup_error = UNSUPPORTED
        return
    sendable = []
    for g in groups:
        try:
            utf8(g)
            sendable.append(g)
        except ValueError as e:
            answers[g].lookup_error = f"INVALID_GROUP_ID ({e})"
    per_request = 500 if version >= BATCHED_FIND_FROM else 1
    chunks = [sendable[i:i + per_request] for i in range(0, len(sendable), per_request)]
    requests = [find_request(version, keys) for keys in chunks]
    for keys, answer in zip(chunks, broker.pipeline(m.FIND_COORDINATOR, version, requests)):
        coords = coordinators(version, answer, keys)
        for c in coords:
            a = answers.get(c.key)
            if a is None:
                continue
            if c.error:
                a.lookup_error = error_name(c.error)
            else:
                a.coordinator_id, a.coordinator = c.node_id, f"{c.host}:{c.port}"
        answered = {c.key for c in coords}
        for g in keys:
            if g not in answered:
                answers[g].lookup_error = "NO_ANSWER"


def _describe(broker: Broker, groups: list[str], answers: dict[str, Answer], batch: int = 200) -> None:
    version = broker.version(m.DESCRIBE_GROUPS)
    if version is None:
        for g in groups:
            answers[g].describe_error = UNSUPPORTED
        return
    requests = [{"Groups": groups[i:i + batch]} for i in range(0, len(groups), batch)]
    for answer in broker.pipeline(m.DESCRIBE_GROUPS, version, requests):
        for d in described_groups(answer):
            if d.group in answers:
                a = answers[d.group]
                a.describe_error = error_name(d.error)
                a.state = d.state if not d.error else None
                a.members = [(mb.member_id, mb.client_id, mb.client_host) for mb in d.members]
                a.described = d.members
                a.assignor = d.protocol or None
    # a KIP-848 group is unknown to DescribeGroups (GROUP_ID_NOT_FOUND, or Dead on some brokers)
    again = [g for g in groups if answers[g].describe_error == "GROUP_ID_NOT_FOUND" or answers[g].state == "Dead"]
    if again and broker.versions is not None and broker.version(m.CONSUMER_GROUP_DESCRIBE) is not None:
        _describe_consumer_groups(broker, again, answers)


def _describe_consumer_groups(broker: Broker, groups: list[str], answers: dict[str, Answer]) -> None:
    """ConsumerGroupDescribe for groups DescribeGroups did not know: those it describes replace
    the answer (state, members with epochs and assignments); the others keep DescribeGroups'."""
    version = broker.version(m.CONSUMER_GROUP_DESCRIBE)
    for d in consumer_groups(broker.call(m.CONSUMER_GROUP_DESCRIBE, version, {"GroupIds": groups})):
        a = answers.get(d.group)
        if a is None or d.error or not d.state:
            continue  # a classic or unknown group: "not a consumer group" / GROUP_ID_NOT_FOUND
        a.describe_error, a.state, a.group_type, a.group_epoch = None, d.state, "consumer", d.group_epoch
        a.assignor = d.assignor or None
        a.members = [(mb.member_id, mb.client_id, mb.client_host) for mb in d.members]
        a.described = d.members


def probe(bootstrap: str, groups: Iterable[str], timeout: float = 10.0, api_versions: bool = True,
          security=None) -> dict[str, Answer]:
    """Per group: the coordinator the cluster names and what that broker answers when asked.

    api_versions=False: the cluster is known to predate 0.10 (no ApiVersions): version 0 at once.
    A coordinator that cannot be reached gets describe_error COORDINATOR_UNREACHABLE. Raises
    ConnectionError only when no bootstrap server answers the lookup at all."""
    groups = list(dict.fromkeys(groups))
    answers = {g: Answer(group=g) for g in groups}
    if not groups:
        return answers

    def lookup(broker: Broker) -> None:
        try:
            _find_coordinators(broker, groups, answers)
        except (OSError, struct.error):
            for a in answers.values():  # a partial answer from a server that failed is not kept
                a.lookup_error = a.coordinator_id = a.coordinator = None
            raise

    ask_first(bootstrap, "the coordinator lookup", lookup, timeout, api_versions, security=security)
    by_broker: dict[str, list[str]] = {}
    for g, a in answers.items():
        if a.coordinator:
            by_broker.setdefault(a.coordinator, []).append(g)
    for addr, gs in by_broker.items():
        host, _, port = addr.rpartition(":")
        try:
            broker = Broker(host, int(port), timeout, api_versions, security)
        except OSError:
            for g in gs:
                answers[g].describe_error = UNREACHABLE
            continue
        try:
            _describe(broker, gs, answers)
        except (OSError, ConnectionError, struct.error):
            for g in gs:
                if answers[g].describe_error is None and answers[g].state is None:
                    answers[g].describe_error = UNREACHABLE
        finally:
            broker.close()
    return answers
