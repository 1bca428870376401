"""Move a partition's leadership: through the /admin znodes on a ZooKeeper-mode cluster (0.9 to
3.x), through the Admin API on a cluster without ZooKeeper (KRaft, `AdminLeadership`).

A preferred-replica election only makes the FIRST replica of the assignment the leader. To move
leadership to another in-sync replica:

1. reorder the replicas, target first, through /admin/reassign_partitions
   ({"version":1,"partitions":[{"topic","partition","replicas"}]}); the replica SET is unchanged,
   so no data moves; the controller deletes the znode when it is done;
2. elect through /admin/preferred_replica_election
   ({"version":1,"partitions":[{"topic","partition"}]}); the controller deletes it when done.

Both znodes are created, never overwritten: if one already exists another admin operation is in
progress and we refuse. They (and a missing /admin) get the ACL of every znode the toolkit
creates (fleetkit.clients.zookeeper.new_znode_acl: creator-all + world-read when the connection
authenticates, the parent's ACL when it does not); a create ZooKeeper refuses is NotAuthorized.
Automatic leader rebalancing (auto.leader.rebalance.enable) must stay off or the controller moves
leadership back to the old preferred replica.

A KRaft cluster (4.x) has no /admin znodes. There the same two steps go through the Admin API:
AlterPartitionReassignments with the reordered replicas (on the wire, fleetkit.clients.
wire_leadership: confluent-kafka 2.x has no such call), then a preferred leader election
(confluent-kafka's AdminClient.elect_leaders); "busy" is ListPartitionReassignments. State and
assignment come from a Metadata request (v7+, leader epochs). ZooKeeper-mode clusters (0.9, and
3.9 in ZooKeeper mode) keep the znodes: one way per generation. Every function below takes
either a ZooKeeperCluster or an AdminLeadership.
"""

from __future__ import annotations

import json
import time

from kazoo.exceptions import NodeExistsError, NoNodeError

from dataclasses import dataclass

from fleetkit.core.errors import FleetError
from fleetkit.clients.zookeeper import ZooKeeperCluster, create_znode, parse_state

REASSIGN = "/admin/reassign_partitions"
ELECTION = "/admin/preferred_replica_election"


class AdminBusy(FleetError):
    """Another reassignment or election is in progress."""


@dataclass(frozen=True)
class MetadataState:
    """A partition's leader state as Metadata gives it (no controller epoch on KRaft)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int | None = None


class AdminLeadership:
    """Leadership of a cluster without ZooKeeper, through the Admin API (see the module).
    `kafka` is a fleetkit.clients.kafka.KafkaCluster (a listener the wire client logs in to, Kafka 2.4 or later)."""

    def __init__(self, kafka):
        self.kafka = kafka
        self.name = kafka.name

    def _partitions(self, topic: str):
        got = self.kafka.leader_epochs([topic])
        if got is None:
            raise FleetError(f"cluster {self.name!r} gives no leader epochs in metadata (SASL mechanism not spoken "
                             "by the wire client, or brokers before Kafka 1.0): leadership cannot be moved through the Admin API here")
        parts, errors = got
        if topic in errors and not parts:
            raise FleetError(f"topic {topic!r} of cluster {self.name!r}: metadata answered {errors[topic]}")
        return {pl.partition: pl for pl in parts if pl.topic == topic}

    def state(self, topic: str, partition: int) -> MetadataState:
        pl = self._partitions(topic).get(partition)
        if pl is None:
            raise FleetError(f"{topic}-{partition} is not in the metadata of cluster {self.name!r}")
        return MetadataState(topic, partition, pl.leader, pl.leader_epoch, tuple(pl.isr))

    def assignment(self, topic: str) -> dict[int, list[int]]:
        return {p: list(pl.replicas) for p, pl in sorted(self._partitions(topic).items())}

    def busy(self) -> list[str]:
        from fleetkit.clients import wire_leadership

        try:
            moving = wire_leadership.reassignments(self.kafka.bootstrap, self.kafka.timeout,
                                                   security=self.kafka.wire_security)
        except wire_leadership.ReassignmentError as e:
            self.kafka.raise_refusal(e.error, None, "ListPartitionReassignments")
            raise FleetError(f"cluster {self.name!r}: {e}") from None
        return [f"partition reassignment of {t}-{p} in progress" for t, p in sorted(moving)]

    def broker_ids(self) -> list[int]:
        return sorted(self.kafka.metadata([]).brokers)

    def reassign(self, topic: str, partition: int, replicas: list[int], timeout: float) -> None:
        from fleetkit.clients import wire_leadership

        try:
            wire_leadership.alter_replicas(self.kafka.bootstrap, topic, partition, replicas, min(timeout, 30.0),
                                              security=self.kafka.wire_security)
        except wire_leadership.ReassignmentError as e:
            self.kafka.raise_refusal(e.error, None, "AlterPartitionReassignments")
            if "REASSIGNMENT_IN_PROGRESS" in str(e):
                raise AdminBusy(f"cluster {self.name!r}: {e}") from None
            raise FleetError(f"cluster {self.name!r}: {e}") from None
        deadline = time.monotonic() + timeout
        while self.assignment(topic).get(partition) != list(replicas) or self.busy():
            if time.monotonic() > deadline:
                raise FleetError(f"the controller of cluster {self.name!r} did not complete the reassignment of "
                                 f"{topic}-{partition} to {list(replicas)} within {timeout:.0f}s")
            time.sleep(0.2)

    def elect(self, partitions: list[tuple[str, int]], timeout: float) -> None:
        from confluent_kafka import ElectionType, KafkaException, TopicPartition

        # no request_timeout keyword: confluent-kafka 2.16's binding rejects any (SystemError)
        fut = self.kafka.admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(t, p) for t, p in partitions])
        try:
            results = fut.result(timeout=timeout + 5)
        except KafkaException as e:
            from fleetkit.clients.kafka import error_name

            self.kafka.raise_refusal(error_name(e), None, "ElectLeaders")
            raise FleetError(f"preferred leader election on cluster {self.name!r} failed: {e}") from None
        for tp, err in (results or {}).items():
            if err is not None:
                self.kafka.raise_refusal(err.name(), None, "ElectLeaders")
            # ELECTION_NOT_NEEDED: the preferred replica leads already
            if err is not None and "ELECTION_NOT_NEEDED" not in err.name():
                raise FleetError(f"preferred leader election of {tp.topic}-{tp.partition} on cluster {self.name!r} "
                                 f"failed: {err.name()} ({err.str()})")


def for_cluster(kafka, zk: ZooKeeperCluster | None):
    """What moves leadership on this cluster: its ZooKeeper (the /admin znodes), or the Admin API
    when the fleet file gives it none (KRaft)."""
    return zk if zk is not None else AdminLeadership(kafka)


def assignment(zk: ZooKeeperCluster | AdminLeadership, topic: str) -> dict[int, list[int]]:
    """The replica assignment of a topic: {partition: [replica, ...]} (first = preferred)."""
    if isinstance(zk, AdminLeadership):
        return zk.assignment(topic)
    try:
        data, _ = zk.client.get(f"/brokers/topics/{topic}")
    except NoNodeError:
        raise FleetError(f"topic {topic!r} does not exist in ZooKeeper of cluster {zk.name!r}") from None
    doc = json.loads(data.decode("utf-8"))
    return {int(p): [int(b) for b in replicas] for p, replicas in doc.get("partitions", {}).items()}


def state(zk: ZooKeeperCluster | AdminLeadership, topic: str, partition: int):
    if isinstance(zk, AdminLeadership):
        return zk.state(topic, partition)
    data, stat = zk.client.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return parse_state(topic, partition, data, stat.version)


def busy(zk: ZooKeeperCluster | AdminLeadership) -> list[str]:
    """Admin operations in progress (their znodes exist; on KRaft: reassignments in progress)."""
    if isinstance(zk, AdminLeadership):
        return zk.busy()
    return [p for p in (REASSIGN, ELECTION) if zk.client.exists(p)]


def _create_admin(zk: ZooKeeperCluster, path: str, doc: dict) -> None:
    try:
        create_znode(zk.client, path, json.dumps(doc).encode("utf-8"), makepath=True, cluster=zk.name)
    except NodeExistsError:
        raise AdminBusy(f"{path} already exists on cluster {zk.name!r}: another admin operation is in progress; "
                        "wait for the controller to finish it") from None


def _wait_gone(zk: ZooKeeperCluster, path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while zk.client.exists(path):
        if time.monotonic() > deadline:
            raise FleetError(f"the controller of cluster {zk.name!r} did not complete {path} within {timeout:.0f}s "
                             "(is a controller elected? see /controller)")
        time.sleep(0.2)


def reorder_replicas(zk: ZooKeeperCluster | AdminLeadership, topic: str, partition: int, replicas: list[int],
                     timeout: float = 60.0) -> None:
    current = assignment(zk, topic).get(partition)
    if current is None:
        raise FleetError(f"{topic}-{partition} has no replica assignment on cluster {zk.name!r}")
    if sorted(current) != sorted(replicas):
        raise FleetError(f"new replica order {replicas} for {topic}-{partition} is not a reordering of {current}")
    if current == replicas:
        return
    if isinstance(zk, AdminLeadership):
        zk.reassign(topic, partition, list(replicas), timeout)
        return
    _create_admin(zk, REASSIGN, {"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": replicas}]})
    _wait_gone(zk, REASSIGN, timeout)
    got = assignment(zk, topic).get(partition)
    if got != replicas:
        raise FleetError(f"after the reassignment {topic}-{partition} has replicas {got}, expected {replicas}")


def preferred_election(zk: ZooKeeperCluster | AdminLeadership, partitions: list[tuple[str, int]],
                       timeout: float = 60.0) -> None:
    if isinstance(zk, AdminLeadership):
        zk.elect(partitions, timeout)
        return
    _create_admin(zk, ELECTION, {"version": 1, "partitions": [
        {"topic": t, "partition": p} for t, p in partitions]})
    _wait_gone(zk, ELECTION, timeout)


def elect_preferred_leaders(zk: ZooKeeperCluster | AdminLeadership, topic: str, timeout: float = 60.0) -> None:
    """A preferred-replica election for every partition of a topic (leaders back on the first
    replica of each assignment: spread over the brokers when the assignment is)."""
    preferred_election(zk, [(topic, p) for p in sorted(assignment(zk, topic))], timeout)


def move_leader(zk: ZooKeeperCluster | AdminLeadership, topic: str, partition: int, target: int,
                timeout: float = 60.0) -> dict:
    """Make `target` (an in-sync replica) the leader: reorder, elect, wait until the state says so.
    Returns {"replicas_before", "replicas_after", "leader_before", "leader_after", "epoch_after"}."""
    before = state(zk, topic, partition)
    replicas = assignment(zk, topic)[partition]
    if target not in before.isr:
        raise FleetError(f"broker {target} is not in the ISR {list(before.isr)} of {topic}-{partition}")
    if busy(zk):
        raise AdminBusy(f"cluster {zk.name!r} has admin operations in progress: {', '.join(busy(zk))}")
    new_order = [target] + [b for b in replicas if b != target]
    reorder_replicas(zk, topic, partition, new_order, timeout)
    if before.leader != target:
        preferred_election(zk, [(topic, partition)], timeout)
    deadline = time.monotonic() + timeout
    after = state(zk, topic, partition)
    while after.leader != target and time.monotonic() < deadline:
        time.sleep(0.2)
        after = state(zk, topic, partition)
    if after.leader != target:
        raise FleetError(f"{topic}-{partition} leader is {after.leader} after the election, not {target}")
    return {"replicas_before": replicas, "replicas_after": new_order, "leader_before": before.leader,
            "leader_after": after.leader, "epoch_before": before.leader_epoch, "epoch_after": after.leader_epoch}
