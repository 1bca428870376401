"""Offsets kept in ZooKeeper, collected through `clusters.collect` (what `fleetctl collect` and the
DAG run) from the real lab: exact offsets back in offsets_snapshots with their `source`.

Per generation, the store kind it can really have:
* 0.9 (ZooKeeper /kafka): kind zookeeper, committed by a real old high-level consumer
  (kafka.tools.ConsoleConsumer --zookeeper, 0.9's console consumer without --new-consumer).
* 3.9 (ZooKeeper /kafka): kind zookeeper; 3.9 no longer ships the old consumer, so the test writes
  the layout it writes (<root>/<group>/offsets/<topic>/<p> decimal text, ids/<consumer id> and
  owners/<topic>/<p> ephemeral).
* 4.3 (KRaft, no ZooKeeper): kind storm in another ZooKeeper standing in for Storm's (the 3.9 lab's),
  JSON written exactly as storm-kafka's PartitionManager.commit() writes it (Storm cannot run here).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from fleetkit.core.datasets import DataRoot, read_dataset
from fleetkit.core.fleet import OffsetStoreSettings

from fleet_airflow import clusters
from tests.integration.fleet_clusters import GENERATIONS, target_fixture

pytestmark = pytest.mark.lab

target = target_fixture(GENERATIONS)


def storm_json(topology_id: str, name: str, offset: int, partition: int, topic: str, host: str, port: int) -> bytes:
    """storm-kafka's committed state, as PartitionManager.commit() builds it (an ImmutableMap:
    topology {id, name}, offset, partition, broker {host, port}, topic, in that order) and
    ZkState.writeJSON serialises it (json-simple JSONValue: compact, "/" escaped as "\\/", UTF-8)
    to <zkRoot>/<spout id>/partition_<N> (apache/storm external/storm-kafka PartitionManager.java)."""
    doc = {"topology": {"id": topology_id, "name": name}, "offset": offset, "partition": partition,
           "broker": {"host": host, "port": port}, "topic": topic}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).replace("/", "\\/").encode("utf-8")


def old_console_consumer(handle, group: str, topic: str, messages: int, tmp_path) -> None:
    """0.9's old high-level consumer: reads `messages` records and commits them to ZooKeeper on exit."""
    from fleetlab.lab_spec import ensure_kafka_dist

    home = ensure_kafka_dist("0.9.0.1")
    props = tmp_path / "consumer.properties"
    escaped = "".join(c if ord(c) < 128 else f"\\u{ord(c):04x}" for c in group)  # .properties are Latin-1
    props.write_text(f"group.id={escaped}\nauto.commit.enable=true\nauto.offset.reset=smallest\n")
    spec = handle.lab.spec
    out = subprocess.run(["java", "-Xmx128m", "-cp", f"{home}/libs/*", "kafka.tools.ConsoleConsumer",
                          "--zookeeper", f"{spec.zk_hosts}{spec.chroot}", "--topic", topic, "--from-beginning",
                          "--max-messages", str(messages), "--consumer.config", str(props)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]


def _snapshots(data_root, source):
    return [r for r in read_dataset(DataRoot(data_root), "offsets_snapshots").to_pylist() if r["source"] == source]


def test_offsets_in_zookeeper_stores_are_collected_exactly(target, lab_fleet, data_root, unique, tmp_path):
    t = target
    topic = unique("zk-orders")
    t.wait_topic(topic)
    t.produce(topic, {0: 10, 1: 20, 2: 5})
    group = unique("old cónsumer 'q' {{ x }}")

    if t.version == "0.9.0.1":
        # the old consumer itself accepts only [A-Za-z0-9._-] in group ids (ConsumerConfig.validateChars);
        # hostile names are what the other generations' stores hold
        group = unique("old.consumer")
        old_console_consumer(t.handle, group, topic, 35, tmp_path)
        store = OffsetStoreSettings(kind="zookeeper", conn_id=t.handle.lab.spec.zk_conn_id,
                                    chroot=t.handle.lab.spec.chroot, root="/consumers")
        expected = {(group, 0): (10, 10, "Empty", False), (group, 1): (20, 20, "Empty", False),
                    (group, 2): (5, 5, "Empty", False)}
        source = "zookeeper"
    elif t.version.startswith("3."):
        spec = t.handle.lab.spec
        zk = spec.zk_client()  # the lab's seeding login (the brokers' user where ZooKeeper requires SASL)
        try:
            base = f"/consumers/{group}"
            for p, o in {0: 4, 1: 20}.items():
                zk.create(f"{base}/offsets/{topic}/{p}", str(o).encode(), makepath=True)
            zk.create(f"{base}/ids/{group}_host-1", b'{"version":1}', ephemeral=True, makepath=True)
            zk.create(f"{base}/owners/{topic}/1", f"{group}_host-1-0".encode(), ephemeral=True, makepath=True)
            store = OffsetStoreSettings(kind="zookeeper", conn_id=spec.zk_conn_id, chroot=spec.chroot,
                                        root="/consumers")
            cluster = dataclasses.replace(t.cluster, offset_stores=(store,))
            clusters.collect(cluster, data_root)
        finally:
            zk.stop()
            zk.close()
        expected = {(group, 0): (4, 10, "Stable", False), (group, 1): (20, 20, "Stable", True)}
        source = "zookeeper"
    else:
        storm = lab_fleet("lab39test").lab.spec  # another ZooKeeper standing in for Storm's
        spout = unique("clicks spout é")
        root = "/" + unique("storm") + "/kafka-spouts"
        zk = storm.zk_client(chroot="")  # Storm's spouts log in as the lab's writer
        try:
            for p, o in {0: 7, 2: 5}.items():
                zk.create(f"{root}/{spout}/partition_{p}",
                          storm_json("clicks-1-1700000000", "clicks / topo", o, p, topic, "127.0.0.1", 9092),
                          makepath=True)
        finally:
            zk.stop()
            zk.close()
        store = OffsetStoreSettings(kind="storm", conn_id=storm.zk_conn_id, root=root)
        expected = {(spout, 0): (7, 10, "Unknown", None), (spout, 2): (5, 5, "Unknown", None)}
        source = "storm"

    if not t.version.startswith("3."):
        cluster = dataclasses.replace(t.cluster, offset_stores=(store,))
        clusters.collect(cluster, data_root)

    got = {(r["group"], r["partition"]): (r["committed_offset"], r["log_end_offset"], r["group_state"], r["assigned"])
           for r in _snapshots(data_root, source) if r["topic"] == topic}
    assert got == expected
    if source == "storm":
        assert {r["member_client_id"] for r in _snapshots(data_root, "storm")} == {"clicks / topo"}
    # the Kafka side of the same collection is marked kafka
    assert all(r["source"] in ("kafka", source) for r in read_dataset(DataRoot(data_root), "offsets_snapshots")
               .to_pylist())


# one generation is enough: the store's ZooKeeper is what fails, not Kafka (the KRaft cluster, whose
# Storm store lives in another ZooKeeper, is the setup where that ZooKeeper can be down alone)
@pytest.mark.parametrize("generation", ["4.3"], ids=["kafka-4.3"])
def test_an_unreachable_store_is_a_problem_not_a_failed_collection(generation, lab_fleet, data_root, unique,
                                                                    monkeypatch):
    import socket

    from tests.integration.fleet_clusters import Target

    t = Target(lab_fleet(GENERATIONS[generation]))
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    monkeypatch.setenv("AIRFLOW_CONN_DEAD_STORM_ZK", json.dumps(
        {"conn_type": "zookeeper", "host": "127.0.0.1", "port": dead_port, "extra": {"timeout": 2}}))
    topic, group = unique("kafka-side"), unique("still collected")
    t.wait_topic(topic)
    t.produce(topic, {0: 3, 1: 3, 2: 3})
    t.commit(group, {(topic, 0): 1, (topic, 1): 2, (topic, 2): 3})
    store = OffsetStoreSettings(kind="storm", conn_id="dead_storm_zk", root="/storm")
    cluster = dataclasses.replace(t.cluster, offset_stores=(store,))

    result = clusters.collect(cluster, data_root)

    rows = [r for r in read_dataset(DataRoot(data_root), "offsets_snapshots").to_pylist() if r["group"] == group]
    assert sorted((r["partition"], r["committed_offset"], r["source"]) for r in rows) == \
        [(0, 1, "kafka"), (1, 2, "kafka"), (2, 3, "kafka")]
    (problem,) = [p for p in result.problems if "storm store dead_storm_zk" in p]
    assert "did not answer" in problem and problem.endswith("skipped")
