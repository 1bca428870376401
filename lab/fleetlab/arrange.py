"""Arranging a lab cluster's state for the tests and the benchmarks: commits made and read back the
way a consumer and kafka-consumer-groups would, group names that land on a chosen
__consumer_offsets partition, and a poll until something holds."""

from __future__ import annotations

import time

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from fleetkit.clients.kafka import client_config
from fleetkit.core.partitioning import partition_for


def committed(bootstrap: str, group: str, topic: str, partitions: int = 3,
              kafka_version: str = "0.9.0.1", security: dict | None = None) -> list[TopicPartition]:
    """The group's commit of each partition of `topic` (offset -1001: none; metadata as librdkafka
    reads it, up to its trailing NUL), read through the admin API the way kafka-consumer-groups does
    (`security`: a secured lab's admin login)."""
    from fleetlab.traffic import login_for

    admin = AdminClient(client_config({"bootstrap.servers": bootstrap, **login_for(bootstrap, security)},
                                      kafka_version))
    fut = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])])
    return next(iter(fut.values())).result().topic_partitions


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int = 3,
                      kafka_version: str = "0.9.0.1", security: dict | None = None) -> dict[int, int]:
    """The group's committed offset of each partition of `topic` (-1001: none)."""
    return {tp.partition: tp.offset for tp in committed(bootstrap, group, topic, partitions, kafka_version, security)}


def wait_until(fn, timeout: float, what: str, interval: float = 0.5, retry_on: tuple = ()):
    """Call `fn` until it returns something true and return that; after `timeout` seconds fail
    naming `what` and the last value (or the last exception of a type in `retry_on`)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = fn()
            if last:
                return last
        except retry_on as e:  # noqa: PERF203 - polling
            last = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached in {timeout}s (last: {last!r})")
        time.sleep(interval)


def groups_on_partition(partition: int, count: int, n: int, name: str) -> list[str]:
    """`n` group names that hash to `partition` of a `count`-partition __consumer_offsets; `name`
    is a format string with {i} (hostile characters welcome)."""
    out, i = [], 0
    while len(out) < n:
        g = name.format(i=i)
        if partition_for(g, count) == partition:
            out.append(g)
        i += 1
    return out


def commit_when_led(lab, topic: str, partitions: int, commits: dict[str, dict[int, int] | list[dict[int, int]]],
                    gap: float = 0.0, metadata: str | None = None) -> None:
    """Create `topic`, wait until every partition has a leader (a commit right after CreateTopics
    may meet UNKNOWN_TOPIC_OR_PART), then commit {group: {partition: offset}} as the lab's admin.
    A list of {partition: offset} per group commits each in turn, `gap` seconds apart (a consumer
    with a commit rhythm the collection reads from __consumer_offsets). `metadata`: every commit's
    commit metadata."""
    from confluent_kafka import Consumer, KafkaException

    lab.create_topic(topic, partitions=partitions)
    admin = lab.admin()

    def led() -> bool:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        return md is not None and md.error is None and len(md.partitions) == partitions and all(
            q.leader >= 0 for q in md.partitions.values())

    # 0.9 answers metadata of a topic being created with a reply librdkafka rejects (_BAD_MSG)
    wait_until(led, 60, f"{topic} led", retry_on=(KafkaException,))
    time.sleep(1)
    for group, sequence in commits.items():
        c = Consumer(lab.spec.client_config({"group.id": group, "enable.auto.commit": False}))
        try:
            for i, offsets in enumerate([sequence] if isinstance(sequence, dict) else sequence):
                if i:
                    time.sleep(gap)
                tps = [TopicPartition(topic, p, o) if metadata is None else TopicPartition(topic, p, o, metadata=metadata)
                       for p, o in offsets.items()]
                wait_until(lambda: c.commit(offsets=tps, asynchronous=False), 30, f"a commit to {topic}",
                           retry_on=(KafkaException,))
        finally:
            c.close()
