"""Move a partition's leadership on a ZooKeeper-mode cluster (0.9 to 3.x), the controller's way.

A preferred-replica election only makes the FIRST replica of the assignment the leader. To move
leadership to another in-sync replica:

1. reorder the replicas, target first, through /admin/reassign_partitions
   ({"version":1,"partitions":[{"topic","partition","replicas"}]}); the replica SET is unchanged,
   so no data moves; the controller deletes the znode when it is done;
2. elect through /admin/preferred_replica_election
   ({"version":1,"partitions":[{"topic","partition"}]}); the controller deletes it when done.

Both znodes are created, never overwritten: if one already exists another admin operation is in
progress and we refuse. Automatic leader rebalancing (auto.leader.rebalance.enable) must stay off
or the controller moves leadership back to the old preferred replica.
"""

from __future__ import annotations

import json
import time

from kazoo.exceptions import NodeExistsError, NoNodeError

from fleetkit.core.errors import FleetError
from fleetkit.clients.zookeeper import ZooKeeperCluster, parse_state

REASSIGN = "/admin/reassign_partitions"
ELECTION = "/admin/preferred_replica_election"


class AdminBusy(FleetError):
    """Another reassignment or election is in progress."""


def assignment(zk: ZooKeeperCluster, topic: str) -> dict[int, list[int]]:
    """The replica assignment of a topic: {partition: [replica, ...]} (first = preferred)."""
    try:
        data, _ = zk.client.get(f"/brokers/topics/{topic}")
    except NoNodeError:
        raise FleetError(f"topic {topic!r} does not exist in ZooKeeper of cluster {zk.name!r}") from None
    doc = json.loads(data.decode("utf-8"))
    return {int(p): [int(b) for b in replicas] for p, replicas in doc.get("partitions", {}).items()}


def state(zk: ZooKeeperCluster, topic: str, partition: int):
    data, stat = zk.client.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return parse_state(topic, partition, data, stat.version)


def busy(zk: ZooKeeperCluster) -> list[str]:
    """Admin operations in progress (their znodes exist)."""
    return [p for p in (REASSIGN, ELECTION) if zk.client.exists(p)]


def _create_admin(zk: ZooKeeperCluster, path: str, doc: dict) -> None:
    try:
        zk.client.create(path, json.dumps(doc).encode("utf-8"), makepath=True)
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


def reorder_replicas(zk: ZooKeeperCluster, topic: str, partition: int, replicas: list[int],
                     timeout: float = 60.0) -> None:
    current = assignment(zk, topic).get(partition)
    if current is None:
        raise FleetError(f"{topic}-{partition} has no replica assignment on cluster {zk.name!r}")
    if sorted(current) != sorted(replicas):
        raise FleetError(f"new replica order {replicas} for {topic}-{partition} is not a reordering of {current}")
    if current == replicas:
        return
    _create_admin(zk, REASSIGN, {"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": replicas}]})
    _wait_gone(zk, REASSIGN, timeout)
    got = assignment(zk, topic).get(partition)
    if got != replicas:
        raise FleetError(f"after the reassignment {topic}-{partition} has replicas {got}, expected {replicas}")


def preferred_election(zk: ZooKeeperCluster, partitions: list[tuple[str, int]], timeout: float = 60.0) -> None:
    _create_admin(zk, ELECTION, {"version": 1, "partitions": [
        {"topic": t, "partition": p} for t, p in partitions]})
    _wait_gone(zk, ELECTION, timeout)


def elect_preferred_leaders(zk: ZooKeeperCluster, topic: str, timeout: float = 60.0) -> None:
    """A preferred-replica election for every partition of a topic (leaders back on the first
    replica of each assignment: spread over the brokers when the assignment is)."""
    preferred_election(zk, [(topic, p) for p in sorted(assignment(zk, topic))], timeout)


def move_leader(zk: ZooKeeperCluster, topic: str, partition: int, target: int, timeout: float = 60.0) -> dict:
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
