"""The lab fleet's three Kafka generations are real, answer clients, and are run by the lab CLI.
3.9 and 4.3 are secured (SASL_SSL, SCRAM, ACLs): the lab's set-up clients log in as its admin user."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from fleetlab import traffic
from tests.helpers import wait_until

REPO = Path(__file__).resolve().parents[2]
FLEETLAB = str(REPO / ".venv" / "bin" / "fleetlab")

pytestmark = [pytest.mark.lab]


def fleetlab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FLEETLAB, *args], capture_output=True, text=True, timeout=300)


def test_each_generation_runs_what_it_claims(generation_lab):
    spec = generation_lab.spec
    lab = generation_lab.lab
    out = fleetlab("status", "--json", "--lab-dir", spec.lab_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.loads(out.stdout)
    components = [r["component"] for r in rows]
    assert components == (["broker-0", "broker-1", "broker-2"] if spec.kraft
                          else ["zookeeper", "broker-0", "broker-1", "broker-2"])
    assert all(r["kafka_version"] == spec.kafka_version and r["answering"] for r in rows)
    assert all(r["rss_mb"] > 0 for r in rows)
    # the JVMs run the pinned distribution's jars
    for r in rows:
        cmd = Path(f"/proc/{r['pid']}/cmdline").read_bytes().split(b"\0")
        assert f"kafka-{spec.kafka_version}/libs/*".encode() in b" ".join(cmd)
    if spec.modern:
        admin = lab.admin()
        md = admin.describe_cluster().result(timeout=30)
        assert sorted(n.id for n in md.nodes) == [0, 1, 2]
        # secured: nothing answers a client without a login on the broker ports
        from fleetkit.clients.protocol import transport

        assert spec.secured and transport.broker_versions(f"127.0.0.1:{spec.broker_port(0)}", timeout=3) is None
        sasl = admin.describe_user_scram_credentials().result(timeout=30)
        assert set(sasl) >= {"admin", "fleet", "fleet-runbook"}
        # the passwords are on no command line and in no log of the lab
        passwords = [pw.encode() for pw in spec.passwords().values()]
        for r in rows:
            assert not any(pw in Path(f"/proc/{r['pid']}/cmdline").read_bytes() for pw in passwords)
        for f in [*spec.path.glob("**/*.log"), *spec.path.glob("**/*.out")]:
            assert not any(pw in f.read_bytes() for pw in passwords), f
        if spec.kraft:
            assert md.cluster_id == spec.cluster_id  # formatted by the storage tool with the lab's id
            props = (Path(spec.log_dir(0)) / "meta.properties").read_text()
            assert f"cluster.id={spec.cluster_id}" in props


def test_a_classic_group_commits_exact_offsets_on_each_generation(generation_lab, unique):
    spec = generation_lab.spec
    admin = spec.security_config("admin")
    topic, group = unique("gen"), unique("classic")
    generation_lab.lab.create_topic(topic, 3)
    traffic.wait_topic(spec.bootstrap, topic, kafka_version=spec.kafka_version, security=admin)
    traffic.produce(spec.bootstrap, topic, {0: 7, 1: 5, 2: 3}, kafka_version=spec.kafka_version, security=admin)
    worker = traffic.ConsumerThread(spec.bootstrap, group, [topic], commit_every=0.2,
                                    kafka_version=spec.kafka_version, security=admin)
    worker.start()
    try:
        wait_until(lambda: worker.processed == 15, 60, "the consumer to read all 15 records")
    finally:
        worker.stop()
    c = traffic.consumer(spec.bootstrap, group, spec.kafka_version, admin)
    try:
        got = {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)}
    finally:
        c.close()
    assert got == {0: 7, 1: 5, 2: 3}


def test_kraft_generation_runs_the_consumer_group_protocol(lab_fleet, unique):
    """KIP-848: a `group.protocol=consumer` member joins with the broker-side heartbeat the lab lowered."""
    from confluent_kafka import ConsumerGroupType

    handle = lab_fleet("lab43test")
    spec = handle.spec
    topic, group = unique("kip848"), unique("new-protocol")
    handle.lab.create_topic(topic, 3)
    traffic.produce(spec.bootstrap, topic, {0: 2, 1: 2, 2: 2}, kafka_version=spec.kafka_version,
                    security=spec.security_config("admin"))
    c = Consumer(spec.client_config({"group.id": group, "group.protocol": "consumer",
                                     "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    try:
        c.subscribe([topic])
        seen, deadline = 0, time.monotonic() + 60
        while seen < 6 and time.monotonic() < deadline:
            m = c.poll(0.5)
            seen += m is not None and m.error() is None
        assert seen == 6
        c.commit(asynchronous=False)
        admin = handle.lab.admin()
        groups = {g.group_id: g for g in admin.list_consumer_groups().result(timeout=30).valid}
        assert groups[group].type == ConsumerGroupType.CONSUMER
    finally:
        c.close()


def test_lab_cli_stops_and_starts_a_broker_of_each_generation(generation_lab):
    spec = generation_lab.spec
    stop = fleetlab("stop-broker", "--lab-dir", spec.lab_dir, "2")
    assert stop.returncode == 0, stop.stderr
    try:
        status = json.loads(fleetlab("status", "--json", "--lab-dir", spec.lab_dir).stdout)
        assert [r["running"] for r in status if r["component"] == "broker-2"] == [False]
    finally:
        start = fleetlab("start-broker", "--lab-dir", spec.lab_dir, "2")
    assert start.returncode == 0, start.stderr
    assert "broker 2: answering" in start.stdout
    assert generation_lab.lab._broker_answers(2)
    if not spec.kraft:
        # leave the shared lab as later tests expect it: leadership back on the preferred replicas
        # (the brokers never rebalance by themselves, and a leader-change watch started later
        # must not see this test's moves)
        from fleetkit.clients import leadership

        def balanced() -> bool:  # broker 2 rejoins the ISRs over a few seconds: elect until all moved
            with generation_lab.zookeeper() as zk:
                leadership.elect_preferred_leaders(zk, "__consumer_offsets")
                states, _ = zk.partition_states(["__consumer_offsets"])
                replicas = leadership.assignment(zk, "__consumer_offsets")
            return all(s.leader == replicas[s.partition][0] for s in states)

        wait_until(balanced, 90, "leadership back on the preferred replicas", interval=2)
