"""Collection against the real lab fleet: produce and commit known numbers, then assert them, on
each generation of the fleet (Kafka 0.9.0.1 and 3.9.2 in ZooKeeper mode, 4.3.1 in KRaft mode)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fleetkit.collection.groups import collect_and_write
from fleetkit.core.partitioning import partition_for
from fleetkit.core.datasets import DataRoot, read_dataset

from fleet_airflow import clusters
from tests.helpers import wait_until
from tests.integration.fleet_clusters import GENERATIONS, ZOOKEEPER_GENERATIONS, target_fixture

pytestmark = pytest.mark.lab

target = target_fixture(GENERATIONS)
zk_target = target_fixture(ZOOKEEPER_GENERATIONS)


def _rows(root, dataset, **match):
    return [r for r in read_dataset(DataRoot(root), dataset).to_pylist()
            if all(r[k] == v for k, v in match.items())]


def _wait(cond, timeout=30, what="condition"):
    wait_until(cond, timeout, what, interval=0.3)


def test_collection_returns_exactly_what_the_cluster_holds(target, data_root, unique):
    t = target
    topic, live_topic = unique("orders"), unique("payments")
    stopped, live = unique("stopped grp; rm -rf / #"), unique("live-ĝrüp {{ 7*7 }}")
    t.wait_topic(topic)
    t.wait_topic(live_topic)
    t.produce(topic, {0: 10, 1: 20, 2: 5})
    t.produce(live_topic, {0: 7, 1: 8, 2: 9})
    t.commit(stopped, {(topic, 0): 4, (topic, 1): 20})  # partition 2: never committed

    member = t.consumer_thread(live, [live_topic], client_id="live-client-1")
    member.start()
    try:
        _wait(lambda: t.committed(live, live_topic) == {0: 7, 1: 8, 2: 9}, 60, "live group committed to the end")
        # the stopped group has no members: 0.9 does not list it; the fleet file names it
        cluster = dataclasses.replace(t.cluster, groups=(stopped,))
        result = clusters.collect(cluster, data_root)
    finally:
        member.stop()

    assert stopped in result.groups and live in result.groups
    snap = {(r["group"], r["topic"], r["partition"]): r
            for r in _rows(data_root, "offsets_snapshots") if r["group"] in (stopped, live)}
    assert {k: (v["committed_offset"], v["log_start_offset"], v["log_end_offset"]) for k, v in snap.items()} == {
        (stopped, topic, 0): (4, 0, 10),
        (stopped, topic, 1): (20, 0, 20),
        (live, live_topic, 0): (7, 0, 7),
        (live, live_topic, 1): (8, 0, 8),
        (live, live_topic, 2): (9, 0, 9),
    }
    for p in range(3):
        r = snap[(live, live_topic, p)]
        assert (r["group_state"], r["assigned"], r["member_client_id"], r["member_host"]) == \
            ("Stable", True, "live-client-1", "127.0.0.1")
    for p in (0, 1):
        r = snap[(stopped, topic, p)]
        # a member-less group: 0.9 says Dead (it forgot the group), 0.10.1+ says Empty
        assert (r["group_state"], r["assigned"], r["member_client_id"]) == (t.memberless_state, False, None)
    assert all(r["cluster"] == t.cluster.name and r["observed_at"] == result.observed_at for r in snap.values())
    assert result.problems == [], result.problems

    # partition state: ZooKeeper's where there is one, else metadata; the offsets topic and every
    # consumed topic, as the brokers see them
    states = {(r["topic"], r["partition"]): r for r in _rows(data_root, "partition_state")}
    count = t.cluster.offsets_topic_partitions
    assert {p for (tp, p) in states if tp == "__consumer_offsets"} == set(range(count))
    md = t.admin_client().list_topics(timeout=10)
    zk_isr = {}
    if t.cluster.zookeeper is not None:
        # the ISR as ZooKeeper holds it, read here on its own: a 0.9 broker's metadata answer keeps
        # the ISR it had when the partition's leader last changed (KAFKA-1367), so after a replica
        # rejoined it names fewer replicas than ZooKeeper and the collection
        with t.handle.zookeeper() as zk:
            for tp in (topic, live_topic, "__consumer_offsets"):
                for p in md.topics[tp].partitions:
                    data, _ = zk.client.get(f"/brokers/topics/{tp}/partitions/{p}/state")
                    zk_isr[(tp, p)] = sorted(json.loads(data)["isr"])
    for tp in (topic, live_topic, "__consumer_offsets"):
        for p, pm in md.topics[tp].partitions.items():
            row = states[(tp, p)]
            assert row["leader"] == pm.leader
            assert sorted(row["isr"]) == zk_isr.get((tp, p), sorted(pm.isrs)), (tp, p, row["isr"], pm.isrs)
            assert row["leader_epoch"] is not None and row["leader_epoch"] >= 0
            if t.cluster.zookeeper is not None:
                assert row["source"] == "zookeeper" and row["controller_epoch"] >= 1
            else:  # KRaft: the metadata's leader epoch; no controller epoch per partition
                assert row["source"] == "metadata" and row["controller_epoch"] is None

    # coordinators: the leader of the group's __consumer_offsets partition
    coords = {r["group"]: r for r in _rows(data_root, "group_coordinators")}
    for g in (stopped, live):
        expected = states[("__consumer_offsets", partition_for(g, count))]["leader"]
        assert coords[g]["coordinator_id"] == expected and coords[g]["error"] is None
    assert (coords[live]["state"], coords[live]["members"]) == ("Stable", 1)
    assert (coords[stopped]["state"], coords[stopped]["members"]) == (t.memberless_state, 0)


def test_a_group_seen_once_is_collected_after_its_members_leave(target, data_root, unique):
    """0.9 forgets a group when its last member leaves (not listed, Dead); later brokers keep it
    listed as Empty. Either way the next collection has it, with its offsets."""
    t = target
    topic, group = unique("events"), unique("short-lived")
    t.wait_topic(topic)
    t.produce(topic, {0: 3, 1: 3, 2: 3})
    member = t.consumer_thread(group, [topic], client_id="short-1")
    member.start()
    try:
        _wait(lambda: t.committed(group, topic) == {0: 3, 1: 3, 2: 3}, 60, "group caught up")
        first = clusters.collect(t.cluster, data_root)
    finally:
        member.stop()
    assert group in first.groups
    admin = t.admin_client()

    def listed_state():
        return {g.group_id: g.state.name for g in admin.list_consumer_groups().result().valid}.get(group)

    if t.memberless_state == "Dead":
        _wait(lambda: listed_state() is None, 30, "0.9 forgets the empty group")
    else:
        _wait(lambda: listed_state() == "EMPTY", 30, "the group is listed Empty")

    second = clusters.collect(t.cluster, data_root)
    assert group in second.groups
    rows = [r for r in _rows(data_root, "offsets_snapshots", group=group)
            if r["observed_at"] == second.observed_at]
    s = t.memberless_state
    assert sorted((r["partition"], r["committed_offset"], r["group_state"], r["assigned"]) for r in rows) == \
        [(0, 3, s, False), (1, 3, s, False), (2, 3, s, False)]


def test_group_whose_last_member_leaves_mid_collection(target, data_root, unique, monkeypatch):
    """The member leaves between ListGroups and DescribeGroups: rows say Dead / not assigned."""
    t = target
    topic, group = unique("mid"), unique("leaving")
    t.wait_topic(topic)
    t.produce(topic, {0: 2, 1: 2, 2: 2})
    member = t.consumer_thread(group, [topic], client_id="leaving-1")
    member.start()
    _wait(lambda: t.committed(group, topic) == {0: 2, 1: 2, 2: 2}, 60, "group caught up")

    from fleetkit.clients.kafka import KafkaCluster

    real_list = KafkaCluster.list_groups_typed

    def list_then_leave(self, errors=None):
        listed = real_list(self, errors)
        member.stop()  # the last member leaves right after the cluster listed the group
        return listed

    monkeypatch.setattr(KafkaCluster, "list_groups_typed", list_then_leave)
    result = clusters.collect(t.cluster, data_root)
    assert group in result.groups
    rows = _rows(data_root, "offsets_snapshots", group=group)
    assert sorted((r["partition"], r["committed_offset"], r["assigned"]) for r in rows) == \
        [(0, 2, False), (1, 2, False), (2, 2, False)]
    assert {r["group_state"] for r in rows} <= {"Dead", "Empty", "PreparingRebalance"}


def test_unreachable_cluster_names_cluster_and_bootstrap(lab, data_root, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_NOWHERE_KAFKA",
                       '{"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1"}}')
    cluster = dataclasses.replace(lab.cluster, name="nowhere", kafka_conn_id="nowhere_kafka", zookeeper=None)
    with pytest.raises(clusters.ClusterUnreachable, match=r"cluster 'nowhere' \(bootstrap servers 127.0.0.1:1\)"):
        clusters.collect(cluster, data_root, timeout=3)
    assert DataRoot(data_root).files("offsets_snapshots") == []


def test_undefined_connection_is_a_clear_error(lab, data_root):
    cluster = dataclasses.replace(lab.cluster, kafka_conn_id="no_such_conn")
    with pytest.raises(clusters.FleetConfigError, match="connection 'no_such_conn' is not defined.*AIRFLOW_CONN_NO_SUCH_CONN"):
        clusters.collect(cluster, data_root)


# ZooKeeper faults exist only on the ZooKeeper-mode clusters (the KRaft cluster has no ZooKeeper)
def test_zookeeper_session_lost_mid_collection_writes_nothing(zk_target, data_root, unique, monkeypatch):
    t = zk_target
    topic, group = unique("zk"), unique("zk-loss")
    t.wait_topic(topic)
    t.commit(group, {(topic, 0): 0})
    from fleetkit.clients.zookeeper import ZooKeeperCluster

    real = ZooKeeperCluster.partition_states

    def lose_session(self, topics):
        self.client.stop()  # the session is gone before the state znodes are read
        return real(self, topics)

    monkeypatch.setattr(ZooKeeperCluster, "partition_states", lose_session)
    cluster = dataclasses.replace(t.cluster, groups=(group,))
    with pytest.raises(clusters.ClusterUnreachable,
                       match=f"collection of cluster '{t.cluster.name}' failed, nothing written"):
        clusters.collect(cluster, data_root)
    root = DataRoot(data_root)
    assert root.files("offsets_snapshots") == [] and root.files("group_coordinators") == []


def test_zookeeper_unreachable_names_the_ensemble(zk_target, data_root, monkeypatch):
    t = zk_target
    zk = t.cluster.zookeeper
    monkeypatch.setenv(f"AIRFLOW_CONN_{zk.conn_id.upper()}", '{"conn_type": "zookeeper", "host": "127.0.0.1", '
                                                             '"port": 1, "extra": {"timeout": 2}}')
    with pytest.raises(clusters.ClusterUnreachable,
                       match=rf"ZooKeeper of cluster '{t.cluster.name}' \(127.0.0.1:1{zk.chroot}\)"):
        clusters.collect(t.cluster, data_root)
    assert DataRoot(data_root).files("partition_state") == []


def test_collect_and_write_is_incremental(target, data_root, unique):
    """Two collections append two sets of rows; the known-groups state file follows."""
    t = target
    topic, group = unique("inc"), unique("inc-group")
    t.wait_topic(topic)
    t.produce(topic, {0: 1, 1: 1, 2: 1})
    t.commit(group, {(topic, 0): 1})
    cluster = dataclasses.replace(t.cluster, groups=(group,))
    with clusters.connected(cluster) as (kafka, zk):
        a = collect_and_write(cluster, kafka, zk, DataRoot(data_root))
        b = collect_and_write(cluster, kafka, zk, DataRoot(data_root))
    rows = _rows(data_root, "offsets_snapshots", group=group)
    assert sorted(r["observed_at"] for r in rows) == sorted([a.observed_at, b.observed_at])
    assert group in DataRoot(data_root).read_json(
        DataRoot(data_root).join("_state", f"cluster={cluster.name}", "known_groups.json"))
