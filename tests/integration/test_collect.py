"""Collection against the real lab fleet: produce and commit known numbers, then assert them."""

from __future__ import annotations

import dataclasses

import pytest
from confluent_kafka.admin import AdminClient

from fleetkit.collection.groups import collect_and_write
from fleetkit.core.partitioning import partition_for
from fleetkit.core.datasets import DataRoot, read_dataset
from fleetkit.clients.kafka import client_config
from fleetlab.traffic import ConsumerThread, commit, produce, wait_topic

from fleet_airflow import clusters
from tests.helpers import committed_offsets, wait_until

pytestmark = pytest.mark.lab


def _rows(root, dataset, **match):
    return [r for r in read_dataset(DataRoot(root), dataset).to_pylist()
            if all(r[k] == v for k, v in match.items())]


def _wait(cond, timeout=30, what="condition"):
    wait_until(cond, timeout, what, interval=0.3)



def test_collection_returns_exactly_what_the_lab_holds(lab, data_root, unique):
    topic, live_topic = unique("orders"), unique("payments")
    stopped, live = unique("stopped grp; rm -rf / #"), unique("live-ĝrüp")
    wait_topic(lab.bootstrap, topic)
    wait_topic(lab.bootstrap, live_topic)
    produce(lab.bootstrap, topic, {0: 10, 1: 20, 2: 5})
    produce(lab.bootstrap, live_topic, {0: 7, 1: 8, 2: 9})
    commit(lab.bootstrap, stopped, {(topic, 0): 4, (topic, 1): 20})  # partition 2: never committed

    member = ConsumerThread(lab.bootstrap, live, [live_topic], client_id="live-client-1")
    member.start()
    try:
        _wait(lambda: committed_offsets(lab.bootstrap, live, live_topic) == {0: 7, 1: 8, 2: 9}, 60,
              "live group committed to the end")
        # the stopped group has no members: 0.9 does not list it; the fleet file names it
        cluster = dataclasses.replace(lab.cluster, groups=(stopped,))
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
        assert (r["group_state"], r["assigned"], r["member_client_id"]) == ("Dead", False, None)
    assert all(r["cluster"] == "labtest" and r["observed_at"] == result.observed_at for r in snap.values())

    # partition state: from ZooKeeper, the offsets topic and every consumed topic, as the brokers see it
    states = {(r["topic"], r["partition"]): r for r in _rows(data_root, "partition_state")}
    assert {p for (t, p) in states if t == "__consumer_offsets"} == set(range(50))
    md = AdminClient(client_config({"bootstrap.servers": lab.bootstrap}, "0.9.0.1")).list_topics(timeout=10)
    for t in (topic, live_topic, "__consumer_offsets"):
        for p, pm in md.topics[t].partitions.items():
            row = states[(t, p)]
            assert row["leader"] == pm.leader and sorted(row["isr"]) == sorted(pm.isrs)
            assert row["source"] == "zookeeper" and row["leader_epoch"] >= 0 and row["controller_epoch"] >= 1

    # coordinators: the leader of the group's __consumer_offsets partition
    coords = {r["group"]: r for r in _rows(data_root, "group_coordinators")}
    for g in (stopped, live):
        expected = states[("__consumer_offsets", partition_for(g, 50))]["leader"]
        assert coords[g]["coordinator_id"] == expected and coords[g]["error"] is None
    assert (coords[live]["state"], coords[live]["members"]) == ("Stable", 1)
    assert (coords[stopped]["state"], coords[stopped]["members"]) == ("Dead", 0)


def test_a_group_seen_once_is_collected_after_the_cluster_forgets_it(lab, data_root, unique):
    topic, group = unique("events"), unique("short-lived")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 3, 1: 3, 2: 3})
    member = ConsumerThread(lab.bootstrap, group, [topic], client_id="short-1")
    member.start()
    try:
        _wait(lambda: committed_offsets(lab.bootstrap, group, topic) == {0: 3, 1: 3, 2: 3}, 60, "group caught up")
        first = clusters.collect(lab.cluster, data_root)
    finally:
        member.stop()
    assert group in first.groups
    admin = AdminClient(client_config({"bootstrap.servers": lab.bootstrap}, "0.9.0.1"))
    _wait(lambda: group not in {g.group_id for g in admin.list_consumer_groups().result().valid}, 30,
          "0.9 forgets the empty group")

    second = clusters.collect(lab.cluster, data_root)
    assert group in second.groups
    rows = [r for r in _rows(data_root, "offsets_snapshots", group=group)
            if r["observed_at"] == second.observed_at]
    assert sorted((r["partition"], r["committed_offset"], r["group_state"], r["assigned"]) for r in rows) == \
        [(0, 3, "Dead", False), (1, 3, "Dead", False), (2, 3, "Dead", False)]


def test_group_whose_last_member_leaves_mid_collection(lab, data_root, unique, monkeypatch):
    """The member leaves between ListGroups and DescribeGroups: rows say Dead / not assigned."""
    topic, group = unique("mid"), unique("leaving")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 2, 1: 2, 2: 2})
    member = ConsumerThread(lab.bootstrap, group, [topic], client_id="leaving-1")
    member.start()
    _wait(lambda: committed_offsets(lab.bootstrap, group, topic) == {0: 2, 1: 2, 2: 2}, 60, "group caught up")

    from fleetkit.clients.kafka import KafkaCluster

    real_list = KafkaCluster.list_groups

    def list_then_leave(self):
        listed = real_list(self)
        member.stop()  # the last member leaves right after the cluster listed the group
        return listed

    monkeypatch.setattr(KafkaCluster, "list_groups", list_then_leave)
    result = clusters.collect(lab.cluster, data_root)
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


def test_zookeeper_session_lost_mid_collection_writes_nothing(lab, data_root, unique, monkeypatch):
    topic, group = unique("zk"), unique("zk-loss")
    wait_topic(lab.bootstrap, topic)
    commit(lab.bootstrap, group, {(topic, 0): 0})
    from fleetkit.clients.zookeeper import ZooKeeperCluster

    real = ZooKeeperCluster.partition_states

    def lose_session(self, topics):
        self.client.stop()  # the session is gone before the state znodes are read
        return real(self, topics)

    monkeypatch.setattr(ZooKeeperCluster, "partition_states", lose_session)
    cluster = dataclasses.replace(lab.cluster, groups=(group,))
    with pytest.raises(clusters.ClusterUnreachable, match="collection of cluster 'labtest' failed, nothing written"):
        clusters.collect(cluster, data_root)
    root = DataRoot(data_root)
    assert root.files("offsets_snapshots") == [] and root.files("group_coordinators") == []


def test_zookeeper_unreachable_names_the_ensemble(lab, data_root, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LABTEST_ZOOKEEPER", '{"conn_type": "zookeeper", "host": "127.0.0.1", "port": 1, '
                                                         '"extra": {"timeout": 2}}')
    with pytest.raises(clusters.ClusterUnreachable, match=r"ZooKeeper of cluster 'labtest' \(127.0.0.1:1/kafka\)"):
        clusters.collect(lab.cluster, data_root)
    assert DataRoot(data_root).files("partition_state") == []


def test_collect_and_write_is_incremental(lab, data_root, unique):
    """Two collections append two sets of rows; the known-groups state file follows."""
    topic, group = unique("inc"), unique("inc-group")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 1, 1: 1, 2: 1})
    commit(lab.bootstrap, group, {(topic, 0): 1})
    cluster = dataclasses.replace(lab.cluster, groups=(group,))
    with clusters.connected(cluster) as (kafka, zk):
        a = collect_and_write(cluster, kafka, zk, DataRoot(data_root))
        b = collect_and_write(cluster, kafka, zk, DataRoot(data_root))
    rows = _rows(data_root, "offsets_snapshots", group=group)
    assert sorted(r["observed_at"] for r in rows) == sorted([a.observed_at, b.observed_at])
    assert group in DataRoot(data_root).read_json(
        DataRoot(data_root).join("_state", "cluster=labtest", "known_groups.json"))
