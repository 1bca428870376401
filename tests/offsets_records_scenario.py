"""What a test writes into a real cluster's __consumer_offsets, and what it expects to read back.

Per generation: simple offset commits (two rounds of three partitions), a classic consumer group
that joins, commits and leaves; on 3.9 and 4.x a transactional producer that commits offsets in
one transaction (COMMIT marker) and aborts another (ABORT marker); on 4.x a consumer of the
consumer group protocol (KIP-848, group.protocol=consumer) that joins, commits and leaves.
Used by tests/integration/test_offsets_records.py and by tests/vectors/capture_offsets_vectors.py.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from fleetkit.clients.kafka import client_config
from fleetkit.core.fleet import version_tuple
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.partitioning import partition_for
from fleetlab import traffic


def _wait_assigned(c: Consumer, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c.poll(0.2)
        if c.assignment():
            return
    raise AssertionError(f"consumer was assigned nothing within {timeout} s")


def _wait_markers_written(bootstrap: str, kafka_version: str, partition: int, timeout: float = 30,
                          security: dict | None = None) -> None:
    """The transaction coordinator writes the markers after EndTxn answers: wait until the
    partition's last stable offset reaches its high watermark."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(client_config({"bootstrap.servers": bootstrap, **(security or {})}, kafka_version))
    tp = TopicPartition(OFFSETS_TOPIC, partition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ends = [next(iter(admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level).values())).result().offset
                for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED)]
        if ends[0] == ends[1]:
            return
        time.sleep(0.1)
    raise AssertionError(f"{OFFSETS_TOPIC}-{partition}: transaction markers not written within {timeout} s")


def run(bootstrap: str, kafka_version: str, create_topic, prefix: str | None = None,
        security: dict | None = None) -> dict:
    """Write the scenario (`security`: a secured lab's admin login); returns the groups, their
    __consumer_offsets partitions and what each group's records must decode to."""
    sec = security or {}
    prefix = prefix or f"rec-{uuid.uuid4().hex[:8]}"
    v = version_tuple(kafka_version)
    topic = f"{prefix}-topic"
    create_topic(topic)
    traffic.wait_topic(bootstrap, topic, kafka_version=kafka_version, security=sec)
    traffic.produce(bootstrap, topic, {0: 5, 1: 5, 2: 5}, kafka_version=kafka_version, security=sec)
    simple, classic = f"{prefix}-simple 'q' {{x}}", f"{prefix}-classic"
    expect: dict = {"topic": topic, "groups": {}}
    # two rounds of simple commits: 6 offset-commit records, the newest per partition wins
    traffic.commit(bootstrap, simple, {(topic, p): p + 1 for p in range(3)}, kafka_version, sec)
    traffic.commit(bootstrap, simple, {(topic, p): p + 2 for p in range(3)}, kafka_version, sec)
    expect["groups"][simple] = {"offset_commits": 6, "latest": {(topic, p): p + 2 for p in range(3)}}
    # a classic group: join, commit once, leave
    c = traffic.consumer(bootstrap, classic, kafka_version, sec, **{"client.id": f"{prefix}-classic-client"})
    c.subscribe([topic])
    _wait_assigned(c)
    c.commit(offsets=[TopicPartition(topic, p, 4) for p in range(3)], asynchronous=False)
    c.close()
    expect["groups"][classic] = {"offset_commits": 3, "latest": {(topic, p): 4 for p in range(3)}}
    if v >= (0, 11):
        txn = f"{prefix}-txn"
        p = Producer(client_config({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}-tid", **sec},
                                   kafka_version))
        p.init_transactions(30)
        meta = Consumer(client_config({"bootstrap.servers": bootstrap, "group.id": txn, **sec}, kafka_version))
        gm = meta.consumer_group_metadata()
        p.begin_transaction()
        p.produce(topic, b"in a transaction", partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, q, 3) for q in range(2)], gm, 30)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"aborted", partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, q, 5) for q in range(2)], gm, 30)
        p.abort_transaction(30)
        meta.close()
        _wait_markers_written(bootstrap, kafka_version, partition_for(txn, 50), security=sec)
        expect["groups"][txn] = {"offset_commits": 2, "latest": {(topic, q): 3 for q in range(2)},
                                 "aborted_records": 2, "markers": {"commit": 1, "abort": 1}}
    if v >= (4, 0):
        modern = f"{prefix}-consumer-protocol"
        c = Consumer(client_config({"bootstrap.servers": bootstrap, "group.id": modern, "group.protocol": "consumer",
                                    "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                    "client.id": f"{prefix}-modern-client", **sec}, kafka_version))
        c.subscribe([topic])
        _wait_assigned(c)
        c.commit(offsets=[TopicPartition(topic, q, 2) for q in range(3)], asynchronous=False)
        c.close()
        expect["groups"][modern] = {"offset_commits": 3, "latest": {(topic, q): 2 for q in range(3)},
                                    "consumer_protocol": True}
    expect["partitions"] = sorted({partition_for(g, 50) for g in expect["groups"]})
    expect["offsets_topic"] = OFFSETS_TOPIC
    return expect
