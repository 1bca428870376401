"""Every Kafka-side consumer is collected on every generation: groups that commit without ever
joining (assign + commit), groups whose members all left before the first collection, KIP-848
consumer groups (Kafka 4 only); and the offset reset goes through each generation's mechanism."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer

from fleetkit.clients import wire as kafka_wire
from fleetkit.clients.kafka import client_config
from fleetkit.collection.coordinators import collect_coordinators
from fleetkit.core.datasets import DataRoot, read_dataset
from fleetkit.stuck import execute as reset_execute

from fleet_airflow import clusters
from tests.helpers import wait_until
from tests.integration.fleet_clusters import GENERATIONS, Target, target_fixture

pytestmark = pytest.mark.lab

target = target_fixture(GENERATIONS)


def _snapshots(root, group):
    return {(r["topic"], r["partition"]): r for r in read_dataset(DataRoot(root), "offsets_snapshots").to_pylist()
            if r["group"] == group}


def test_commit_only_and_departed_groups_are_collected(target: Target, data_root, unique):
    t = target
    topic = unique("events")
    standalone, departed = unique("assign+commit 'grp' $(x)"), unique("departed {{ g }}")
    t.wait_topic(topic)
    t.produce(topic, {0: 10, 1: 10, 2: 10})
    t.commit(standalone, {(topic, 0): 7, (topic, 1): 5, (topic, 2): 3})  # assign + commit, never joins
    member = t.consumer_thread(departed, [topic], client_id="departed-client")
    member.start()
    try:
        wait_until(lambda: t.committed(departed, topic) == {0: 10, 1: 10, 2: 10}, 60, "departed group at the end",
                   interval=0.3)
    finally:
        member.stop()
    # neither group is named in the fleet file, and nothing collected this cluster into data_root before
    result = clusters.collect(t.cluster, data_root)

    assert standalone in result.groups and departed in result.groups
    got = {g: {tp: (r["committed_offset"], r["log_end_offset"], r["group_state"], r["assigned"])
               for tp, r in _snapshots(data_root, g).items()} for g in (standalone, departed)}
    state = t.memberless_state
    assert got == {
        standalone: {(topic, 0): (7, 10, state, False), (topic, 1): (5, 10, state, False),
                     (topic, 2): (3, 10, state, False)},
        departed: {(topic, p): (10, 10, state, False) for p in range(3)},
    }
    expected_type = None if state == "Dead" else "classic"  # 0.9 forgot them: it cannot say
    assert {r["group_type"] for g in (standalone, departed) for r in _snapshots(data_root, g).values()} == \
        {expected_type}
    assert result.problems == [], result.problems


# KIP-848 consumer groups exist only from Kafka 4 (group.protocol=consumer): the 4.3 cluster alone
@pytest.mark.parametrize("generation", ["4.3"], ids=["kafka-4.3"])
def test_kip848_group_is_collected_with_state_type_and_assignment(generation, lab_fleet, data_root, unique):
    t = Target(lab_fleet(GENERATIONS[generation]))
    topic, group = unique("kip848"), unique("kip848 grp ĝ")
    t.wait_topic(topic)
    t.produce(topic, {0: 4, 1: 5, 2: 6})
    c = Consumer(client_config({"bootstrap.servers": t.bootstrap, "group.id": group, "group.protocol": "consumer",
                                "client.id": "kip848-client", "auto.offset.reset": "earliest",
                                "enable.auto.commit": False, **t.admin_login}, t.version))
    try:
        c.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 15 and time.monotonic() < deadline:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                seen += 1
        assert seen == 15
        c.commit(asynchronous=False)
        wait_until(lambda: t.committed(group, topic) == {0: 4, 1: 5, 2: 6}, 30, "KIP-848 group committed",
                   interval=0.3)
        result = clusters.collect(t.cluster, data_root)
        with clusters.connected(t.cluster) as (kafka, zk):  # the ownership check's light pass
            light = collect_coordinators(t.cluster, kafka, zk, groups=[group]).rows["group_coordinators"]
        # ConsumerGroupDescribe on the wire, logged in as the toolkit
        answer = kafka_wire.probe(t.bootstrap, [group], security=t.wire_security)[group]
    finally:
        c.close()

    got = {tp: (r["committed_offset"], r["group_state"], r["group_type"], r["assigned"], r["member_client_id"])
           for tp, r in _snapshots(data_root, group).items()}
    assert got == {(topic, p): (n, "Stable", "consumer", True, "kip848-client") for p, n in ((0, 4), (1, 5), (2, 6))}
    (member,) = answer.described
    assert (answer.error, answer.state, answer.group_type) == (None, "Stable", "consumer")
    assert (member.client_id, member.assignment) == ("kip848-client", tuple((topic, p) for p in range(3)))
    assert member.member_epoch >= 1 and answer.group_epoch >= member.member_epoch
    assert {r["member_epoch"] for r in _snapshots(data_root, group).values()} == {member.member_epoch}
    coord = [r for r in read_dataset(DataRoot(data_root), "group_coordinators").to_pylist() if r["group"] == group]
    assert [(r["error"], r["state"], r["members"]) for r in coord] == [(None, "Stable", 1)]
    assert [(r["error"], r["state"], r["members"]) for r in light] == [(None, "Stable", 1)]
    assert not [p for p in result.problems if group in p], result.problems


def test_reset_goes_through_the_generation_s_mechanism(target: Target, unique, tmp_path):
    t = target
    topic, group = unique("reset"), unique("reset grp")
    t.wait_topic(topic)
    t.produce(topic, {0: 10, 1: 10, 2: 10})
    t.commit(group, {(topic, 0): 3, (topic, 1): 5, (topic, 2): 10})
    plan = {"details": {"group": group, "topic": topic,
                        "partitions": [{"partition": 0, "committed": 3, "new": 8},
                                       {"partition": 1, "committed": 5, "new": 0}]},
            "preconditions": [{"check": "committed_unchanged", "expected": {"0": 3, "1": 5}}]}
    with clusters.connected(t.cluster, changes=True) as (kafka, _zk):  # the runbook principal (fleet-runbook)
        assert reset_execute.check_preconditions(kafka, plan) == []
        out = reset_execute.execute(kafka, plan, journal_path=tmp_path / "journal.jsonl")
    assert out["mechanism"] == ("commit_offsets" if t.cluster.version_tuple < (0, 10) else "alter_offsets")
    assert t.committed(group, topic) == {0: 8, 1: 0, 2: 10}


def test_stuck_verdicts_from_real_collections(target: Target, data_root, unique):
    """The rules on rows the generation's brokers gave: a memberless group frozen behind the log
    end is STOPPED (0.9 says Dead, newer brokers Empty: the same verdict), a live member stuck
    replaying a poison record is STALLED, its healthy partitions OK; lags exact."""
    import datetime as dt

    from fleetkit.collection.groups import collect_and_write
    from fleetkit.stuck import rules

    t = target
    topic, stopped, stuck = unique("verdicts"), unique("stopped grp"), unique("poison grp")
    t.wait_topic(topic)
    t.produce(topic, {0: 10, 1: 10, 2: 10})
    t.commit(stopped, {(topic, 0): 4, (topic, 1): 4, (topic, 2): 4})  # no member: assign + commit only

    def handle(msg):  # partition 0's record at offset 2 never gets processed
        return not (msg.partition() == 0 and msg.offset() == 2)

    member = t.consumer_thread(stuck, [topic], client_id="poisoned")
    member.handle = handle
    member.start()
    try:
        wait_until(lambda: t.committed(stuck, topic) == {0: 2, 1: 10, 2: 10}, 60, "poisoned member committed",
                   interval=0.3)
        base = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        with clusters.connected(t.cluster) as (kafka, zk):
            for k in range(3):  # three collections 5 minutes apart (observed_at injected)
                collect_and_write(t.cluster, kafka, zk, DataRoot(data_root), now=base + dt.timedelta(minutes=5 * k))
    finally:
        member.stop()

    rows = [r for r in read_dataset(DataRoot(data_root), "offsets_snapshots").to_pylist()
            if r["topic"] == topic and r["group"] in (stopped, stuck)]
    window = dt.timedelta(minutes=15)
    verdicts = {}
    for g in (stopped, stuck):
        for p in range(3):
            part = [r for r in rows if r["group"] == g and r["partition"] == p]
            f = rules.features(part, base + dt.timedelta(minutes=10), window)
            verdicts[(g, p)] = (rules.classify(f, window.total_seconds())[0], f.latest_lag, f.snapshots)
    assert verdicts == {
        (stopped, 0): ("STOPPED", 6, 3), (stopped, 1): ("STOPPED", 6, 3), (stopped, 2): ("STOPPED", 6, 3),
        (stuck, 0): ("STALLED", 8, 3), (stuck, 1): ("OK", 0, 3), (stuck, 2): ("OK", 0, 3),
    }
    assert {r["group_state"] for r in rows if r["group"] == stopped} == {t.memberless_state}
    assert {r["group_state"] for r in rows if r["group"] == stuck} == {"Stable"}
