"""Follow the __consumer_offsets leaders of a cluster: ZooKeeper watches on a ZooKeeper-mode
cluster, Metadata polls on a cluster without ZooKeeper (KRaft).

The controller rewrites /brokers/topics/__consumer_offsets/partitions/<p>/state with every
LeaderAndIsr change; the leader epoch grows by one with each new leader. `LeaderEpochWatch` keeps
a ZooKeeper watch on every state znode (and on the partitions list, for a topic created later) and
calls `notify()` from kazoo's thread when one fires, so an asyncio waiter (the Airflow trigger)
or a plain thread can wake up, re-read, and compare with what it saw before (`changes`).

ZooKeeper watches are one-shot and die with the session: every read re-arms them, and a session
that is lost (expired) and then re-established triggers `notify("session")` so the caller re-reads
everything -- a change made while the session was gone is then found by comparing epochs, not
missed.

A KRaft cluster has no ZooKeeper: `MetadataEpochPoll` reads the same facts (leader, leader epoch,
ISR per partition) from a Metadata request (v7+, fleetkit.clients.wire) each time it is asked; the
trigger asks every few seconds.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from kazoo.client import KazooState
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType

from fleetkit.collection.offsets_topic import OFFSETS_TOPIC
from fleetkit.clients.zookeeper import ZooKeeperCluster, parse_state

log = logging.getLogger(__name__)

PARTITIONS = f"/brokers/topics/{OFFSETS_TOPIC}/partitions"
Snapshot = dict  # {partition: {"leader", "leader_epoch", "isr", "controller_epoch"}}


def changes(before: Snapshot, after: Snapshot) -> list[dict]:
    """Partitions whose leader epoch (or leader) differs between two snapshots, as change records."""
    out = []
    for p in sorted(set(before) | set(after)):
        a, b = before.get(p), after.get(p)
        if b is None:
            continue
        if a is None or a["leader_epoch"] != b["leader_epoch"] or a["leader"] != b["leader"]:
            out.append({"partition": p, "from_leader": a["leader"] if a else None, "to_leader": b["leader"],
                        "from_epoch": a["leader_epoch"] if a else None, "to_epoch": b["leader_epoch"],
                        "isr": list(b["isr"])})
    return out


class LeaderEpochWatch:
    """Watches one cluster's __consumer_offsets leaders. `notify(reason)` is called from kazoo's
    threads (never blocks there); call `snapshot()` to re-read and re-arm the watches."""

    def __init__(self, zk: ZooKeeperCluster, notify: Callable[[str], None]):
        self.zk = zk
        self.notify = notify
        self._lost = False
        self._lock = threading.Lock()
        self.sessions = 0  # sessions established (1 + re-established after loss)

    def start(self) -> None:
        self.zk.client.add_listener(self._on_state)
        self.zk.start()
        self.sessions = 1

    def stop(self) -> None:
        try:
            self.zk.client.remove_listener(self._on_state)
        except Exception:  # noqa: BLE001 - best effort on shutdown
            pass
        self.zk.stop()

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            log.warning("ZooKeeper session of cluster %s lost: watches are gone until a new session", self.zk.name)
            self._lost = True
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection of cluster %s suspended", self.zk.name)
        elif state == KazooState.CONNECTED:
            if self._lost:
                self._lost = False
                self.sessions += 1
                log.warning("ZooKeeper session of cluster %s re-established: re-reading every partition state",
                            self.zk.name)
                self.notify("session")
            else:
                self.notify("reconnected")

    def _on_event(self, event) -> None:
        if event.type != EventType.NONE:  # NONE: connection-state noise, handled by _on_state
            self.notify(event.path)

    def snapshot(self) -> Snapshot:
        """Read every partition's state znode, arming a watch on each (and on the list)."""
        client = self.zk.client
        with self._lock:
            try:
                parts = client.get_children(PARTITIONS, watch=self._on_event)
            except NoNodeError:
                client.exists(PARTITIONS, watch=self._on_event)  # fires when the topic appears
                return {}
            futures = {int(p): client.get_async(f"{PARTITIONS}/{p}/state", watch=self._on_event) for p in parts}
            out: Snapshot = {}
            for p, fut in futures.items():
                try:
                    data, stat = fut.get(timeout=self.zk.timeout)
                except NoNodeError:
                    client.exists(f"{PARTITIONS}/{p}/state", watch=self._on_event)
                    continue
                try:
                    s = parse_state(OFFSETS_TOPIC, p, data, stat.version)
                except ValueError as e:
                    log.warning("%s", e)
                    continue
                out[p] = {"leader": s.leader, "leader_epoch": s.leader_epoch, "isr": list(s.isr),
                          "controller_epoch": s.controller_epoch}
            return out


class MetadataEpochPoll:
    """Reads one cluster's __consumer_offsets leaders from a Metadata request (v7 or later: each
    partition's leader epoch, what the partition state znode gives on ZooKeeper-mode clusters).
    For clusters without ZooKeeper (KRaft): there is nothing to watch, the caller polls
    `snapshot()`. Same shape as `LeaderEpochWatch` (start, stop, snapshot, sessions); blocking:
    run `snapshot()` in a thread from asyncio."""

    def __init__(self, kafka):
        self.kafka = kafka  # a fleetkit.clients.kafka.KafkaCluster
        self.sessions = 1   # no session to lose: always 1
        self.polls = 0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.kafka.close()

    def snapshot(self) -> Snapshot:
        """Every partition's leader, leader epoch and ISR from one Metadata answer (topic never
        auto-created). Raises ValueError when the cluster cannot give leader epochs (not
        logged in by the wire client (SASL GSSAPI / OAUTHBEARER), or brokers before Kafka 1.0),
        ClusterUnreachable when no broker answers."""
        got = self.kafka.leader_epochs([OFFSETS_TOPIC])
        self.polls += 1
        if got is None:
            raise ValueError(f"cluster {self.kafka.name!r} (bootstrap servers {self.kafka.bootstrap}) gives no leader "
                             "epochs in metadata (a SASL mechanism the wire client does not speak, or brokers "
                             "before Kafka 1.0): its "
                             f"{OFFSETS_TOPIC} leaders cannot be polled")
        parts, errors = got
        if errors.get(OFFSETS_TOPIC) and errors[OFFSETS_TOPIC] != "UNKNOWN_TOPIC_OR_PARTITION":
            log.warning("cluster %s: metadata answered %s for %s", self.kafka.name, errors[OFFSETS_TOPIC],
                        OFFSETS_TOPIC)
        return {p.partition: {"leader": p.leader, "leader_epoch": p.leader_epoch, "isr": list(p.isr),
                              "controller_epoch": None}
                for p in parts if p.topic == OFFSETS_TOPIC}
