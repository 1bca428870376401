"""Where the partition leaders are: leader, ISR and epochs of a topic's partitions, read one way.

ZooKeeper when the cluster has one (its partition state znodes carry the leader and controller
epochs, and they answer even when the leader broker does not), else a metadata request: on the
wire (Metadata v7+, with leader epochs; KRaft clusters have no controller epoch per partition)
when the brokers speak it, else through the admin client (no epochs). ``offsets_topic_state`` is that read for __consumer_offsets, the question every
capability asks ("which broker leads the partition that coordinates this group?");
``partition_leaders`` is the same read for any topics (the collection records the leaders of
the topics it snapshots too).

With ZooKeeper, only ZooKeeper is read: a topic ZooKeeper does not have is reported as a
problem, never looked up through metadata (a metadata request may create a topic on clusters
with auto.create.topics.enable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from fleetkit.core.errors import authorization_error
from fleetkit.core.kafka_names import OFFSETS_TOPIC

if TYPE_CHECKING:  # the readers are passed in: importing this module loads no client library
    from fleetkit.clients.kafka import KafkaCluster
    from fleetkit.clients.zookeeper import ZooKeeperCluster


@dataclass(frozen=True)
class LeaderState:
    topic: str
    partition: int
    leader: int                   # -1: no leader
    isr: tuple[int, ...]
    leader_epoch: int | None      # None when the metadata read carries none (brokers before 1.0, TLS/SASL)
    controller_epoch: int | None  # None when read from metadata (ZooKeeper only)
    source: str                   # "zookeeper" | "metadata"


def partition_leaders(kafka: KafkaCluster, zk: ZooKeeperCluster | None, topics: Iterable[str],
                      problems: list[str] | None = None, refusals: list | None = None) -> list[LeaderState]:
    """Leader, ISR and epochs of every partition of `topics` (ZooKeeper when given, else metadata).

    What could not be read is appended to `problems` when given (ZooKeeper's problems prefixed
    "zookeeper: "; from metadata, each partition without a leader), never raised: a topic being
    created has no state yet. ZooKeeper's states come in its order; metadata's sorted by
    (topic, partition). A topic the principal may not DESCRIBE is also appended to `refusals`
    (NotAuthorized) when given."""
    topics = list(topics)
    problems = problems if problems is not None else []
    if zk is not None:
        states, zk_problems = zk.partition_states(topics)
        problems.extend(f"zookeeper: {p}" for p in zk_problems)
        return [LeaderState(s.topic, s.partition, s.leader, tuple(s.isr), s.leader_epoch, s.controller_epoch,
                            "zookeeper") for s in states]
    epochs = kafka.leader_epochs(topics)
    if epochs is not None:
        parts, errors = epochs
        for t, err in sorted(errors.items()):
            problems.append(f"topic {t!r}: metadata answered {err}")
            if refusals is not None and authorization_error(err):
                refusals.append(kafka.refused(err, t, "Metadata"))
        out = []
        for pl in sorted(parts, key=lambda x: (x.topic, x.partition)):
            if pl.leader < 0:
                problems.append(f"partition {pl.topic}-{pl.partition} has no leader")
            out.append(LeaderState(pl.topic, pl.partition, pl.leader, pl.isr,
                                   pl.leader_epoch if pl.leader_epoch >= 0 else None, None, "metadata"))
        return out
    out = []
    md = kafka.metadata(topics)
    unseen = set(topics) - {t for t, _ in md.partitions}
    if refusals is not None and unseen:
        for t in kafka.refused_topics(unseen):
            refusals.append(kafka.refused("TOPIC_AUTHORIZATION_FAILED", t, "Metadata"))
    for (t, p), pm in sorted(md.partitions.items()):
        if t not in topics:
            continue
        if pm.leader < 0:
            problems.append(f"partition {t}-{p} has no leader")
        out.append(LeaderState(t, p, pm.leader, tuple(pm.isr), None, None, "metadata"))
    return out


def offsets_topic_state(kafka: KafkaCluster, zk: ZooKeeperCluster | None,
                        problems: list[str] | None = None) -> dict[int, LeaderState]:
    """{partition: LeaderState} of __consumer_offsets (ZooKeeper when given, else metadata); empty
    when the topic does not exist yet (no group has committed). NotAuthorized when the principal may
    not DESCRIBE the topic (it may well exist)."""
    refusals: list = []
    found = {s.partition: s for s in partition_leaders(kafka, zk, [OFFSETS_TOPIC], problems, refusals)}
    if refusals and not found:
        raise refusals[0]
    return found


def leaders_and_isr(kafka: KafkaCluster, zk: ZooKeeperCluster | None) -> tuple[dict[int, int], dict[int, list[int]]]:
    """({partition: leader}, {partition: ISR}) of __consumer_offsets (offsets_topic_state)."""
    states = offsets_topic_state(kafka, zk)
    return {p: s.leader for p, s in states.items()}, {p: list(s.isr) for p, s in states.items()}
