"""Pure helpers of the Kafka facade, the collector and the settings."""

import datetime as dt
import json

import pytest

from fleetkit.collection.groups import FORGET_AFTER, assignment_of, update_known_groups
from fleetkit.clients.kafka import GroupDescription, Member, client_config, state_name, strip_host
from fleetlab.lab import LabSpec
from fleetkit.clients.zookeeper import join_chroot, parse_state


@pytest.mark.parametrize("raw, host", [
    ("/127.0.0.1", "127.0.0.1"), ("10.0.0.7", "10.0.0.7"), ("10.0.0.7:5123", "10.0.0.7"),
    ("/10.0.0.7:5123", "10.0.0.7"), ("[::1]:9092", "::1"), ("fe80::1", "fe80::1"), ("", ""), (None, ""),
    ("localhost/127.0.0.1", "127.0.0.1"),  # 0.9 on an SSL listener (a resolved InetAddress)
])
def test_strip_host(raw, host):
    assert strip_host(raw) == host


@pytest.mark.parametrize("raw, name", [
    ("STABLE", "Stable"), ("EMPTY", "Empty"), ("DEAD", "Dead"),
    ("PREPARING_REBALANCING", "PreparingRebalance"), ("COMPLETING_REBALANCING", "CompletingRebalance"),
    ("AwaitingSync", "CompletingRebalance"), ("something-new", "Unknown"),
])
def test_state_names_follow_kafka(raw, name):
    assert state_name(raw) == name


def test_client_config_adds_09_fallbacks_only_for_old_brokers():
    old = client_config({"bootstrap.servers": "a:1"}, "0.9.0.1")
    assert old["api.version.request"] is False and old["broker.version.fallback"] == "0.9.0"
    new = client_config({"bootstrap.servers": "a:1"}, "2.8.0")
    assert "api.version.request" not in new and "broker.version.fallback" not in new
    kept = client_config({"bootstrap.servers": "a:1", "broker.version.fallback": "0.8.2"}, "0.9.0.1")
    assert kept["broker.version.fallback"] == "0.8.2"
    with pytest.raises(ValueError, match="bootstrap.servers"):
        client_config({}, "0.9.0.1")


def _desc(state="Stable", members=(), error=None):
    return GroupDescription(group="g", state=state, coordinator_id=1, members=tuple(members), error=error)


def test_assignment_rules():
    m1 = Member("m1", "c1", "10.0.0.1", (("t", 0), ("t", 1)))
    m2 = Member("m2", "c2", "10.0.0.2", (("t", 2),))
    stable = _desc(members=[m1, m2])
    assert assignment_of(stable, ("t", 2)) == (True, "c2", "10.0.0.2")
    assert assignment_of(stable, ("t", 3)) == (False, None, None)         # live members, none holds it
    assert assignment_of(_desc("Dead"), ("t", 0)) == (False, None, None)  # 0.9: last member left
    assert assignment_of(_desc("Empty"), ("t", 0)) == (False, None, None)
    assert assignment_of(None, ("t", 0)) == (None, None, None)            # describe gave nothing
    assert assignment_of(_desc(error="NOT_COORDINATOR"), ("t", 0)) == (None, None, None)
    rebalancing = _desc("PreparingRebalance", [Member("m1", "c1", "h", ())])
    assert assignment_of(rebalancing, ("t", 0)) == (None, None, None)     # 0.9 omits assignments
    unknown_assignment = _desc("Stable", [Member("m1", "c1", "h", None)])
    assert assignment_of(unknown_assignment, ("t", 0)) == (None, None, None)


def test_known_groups_are_remembered_and_forgotten():
    now = dt.datetime(2026, 1, 10, tzinfo=dt.timezone.utc)
    old = (now - FORGET_AFTER - dt.timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    recent = (now - dt.timedelta(days=1)).isoformat().replace("+00:00", "Z")
    known = {"gone": old, "stopped": recent}
    out = update_known_groups(known, listed={"live"}, with_offsets={"committed"}, now=now)
    assert set(out) == {"stopped", "live", "committed"}
    assert out["live"] == "2026-01-10T00:00:00Z"
    assert out["stopped"] == recent  # not seen again: keeps its last sighting


def test_zookeeper_helpers():
    assert join_chroot("h1:2181,h2:2181", "/kafka") == "h1:2181,h2:2181/kafka"
    assert join_chroot("h1:2181", "") == "h1:2181"
    s = parse_state("t", 3, b'{"controller_epoch":4,"leader":2,"version":1,"leader_epoch":7,"isr":[2,0]}', 9)
    assert (s.leader, s.leader_epoch, s.controller_epoch, s.isr, s.version) == (2, 7, 4, (2, 0), 9)
    with pytest.raises(ValueError, match="t-3"):
        parse_state("t", 3, b"not json", 0)


def test_lab_spec_connections_and_ports():
    spec = LabSpec(lab_dir="/tmp/x", name="lab-two", zk_port=1000, broker_base_port=2000, brokers=3)
    assert spec.bootstrap == "127.0.0.1:2000,127.0.0.1:2001,127.0.0.1:2002"
    env = spec.connection_env()
    kafka = json.loads(env["AIRFLOW_CONN_LAB_TWO_KAFKA"])
    assert kafka == {"conn_type": "kafka", "extra": {"bootstrap.servers": spec.bootstrap}}
    zk = json.loads(env["AIRFLOW_CONN_LAB_TWO_ZOOKEEPER"])
    assert zk["port"] == 1000 and zk["host"] == "127.0.0.1"
    props = spec.broker_props(1)
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:2001"
    assert props["zookeeper.connect"] == "127.0.0.1:1000/kafka"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["auto.leader.rebalance.enable"] == "false"
    over = LabSpec(lab_dir="/tmp/x", broker_overrides={"log.cleaner.dedupe.buffer.size": 2097152})
    assert over.broker_props(0)["log.cleaner.dedupe.buffer.size"] == "2097152"
    assert over.cleaner_settings()["dedupe_buffer_size"] == 2097152
