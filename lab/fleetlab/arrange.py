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
    (fut,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])]).values()
    try:
        return fut.result().topic_partitions
    finally:
        # a failed Future keeps the exception it raised, whose traceback keeps this frame, which
        # keeps the Future: without these dels that cycle keeps the client (its librdkafka threads
        # and any coordinator request still pending) alive until the cyclic GC runs, possibly
        # across a broker restart, which librdkafka 2.x does not survive (an abort in
        # rd_kafka_enq_once_del_source_return). Here the client is destroyed on return.
        del fut, admin


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


def offsets_partition_bytes(spec, partition: int, broker: int = 0) -> int:
    """The size of a __consumer_offsets partition's segment files on one broker of a lab (`spec`)."""
    from fleetkit.core.kafka_names import OFFSETS_TOPIC

    return sum(f.stat().st_size for f in (spec.log_dir(broker) / f"{OFFSETS_TOPIC}-{partition}").glob("*.log"))


def bloat_offsets_partition(lab, partition: int, target_bytes: int, groups: list[str], topic: str, partitions: int,
                            metadata_bytes: int, halfway=None, progress: bool = True) -> float:
    """Grow __consumer_offsets-`partition` of `lab` (a fleetlab.lab.Lab) to `target_bytes` on broker
    0: `groups` (names hashing onto it, groups_on_partition) commit every partition of `topic` (it
    has `partitions`; created and led, commit_when_led) over and over, 40 commits of each per group
    and turn, each commit carrying a `metadata_bytes` metadata string (what a client may store
    beside its offset: records the size of real ones with long names). `halfway()` is called once
    when the partition is half full. Returns the seconds it took."""
    from fleetlab.traffic import bulk_commits

    meta = "m" * metadata_bytes
    config = lab.spec.client_config()
    chunk = partitions * 40  # records per group and turn
    t0, turn, half_done, last_print = time.monotonic(), 0, halfway is None, time.monotonic()
    while (size := offsets_partition_bytes(lab.spec, partition)) < target_bytes:
        for g in groups:
            bulk_commits(config, g, topic, chunk, partitions, in_flight=16, metadata=meta, first=turn * 40 + 1)
        turn += 1
        if not half_done and size >= target_bytes / 2:
            halfway()
            half_done = True
        if progress and time.monotonic() - last_print > 15:
            last_print = time.monotonic()
            print(f"  {size / 2**30:.2f} of {target_bytes / 2**30:.2f} GiB in {time.monotonic() - t0:.0f}s", flush=True)
    if not half_done:
        halfway()
    return time.monotonic() - t0
