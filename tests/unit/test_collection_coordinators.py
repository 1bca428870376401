"""Where the __consumer_offsets leaders are (fleetkit.clients.offsets_leaders) and the ownership
check's settle loop (fleetkit.collection.coordinators) without a cluster."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from fleetkit.clients.kafka import Metadata, PartitionMeta
from fleetkit.clients.offsets_leaders import LeaderState, offsets_topic_state, partition_leaders
from fleetkit.clients.zookeeper import PartitionState
from fleetkit.collection import coordinators
from fleetkit.core.partitioning import partition_for

OFFSETS = "__consumer_offsets"


class FakeKafka:
    name = "lab"

    def __init__(self, leaders: dict[int, int]):
        self.leaders = leaders
        self.asked = []

    def leader_epochs(self, topics):
        return None  # brokers whose metadata carries no leader epochs: the admin client's metadata

    def metadata(self, topics=None):
        self.asked.append(sorted(topics))
        md = Metadata(brokers={1: "b1", 2: "b2"}, controller_id=1)
        for p, leader in self.leaders.items():
            md.partitions[(OFFSETS, p)] = PartitionMeta(OFFSETS, p, leader, (1, 2), (1, 2) if leader >= 0 else ())
        md.partitions[("other", 0)] = PartitionMeta("other", 0, 1, (1,), (1,))
        return md


class FakeZk:
    def __init__(self, states, problems=()):
        self.states, self.problems = states, list(problems)

    def partition_states(self, topics):
        return [s for s in self.states if s.topic in topics], self.problems


def test_leaders_from_metadata_without_zookeeper():
    problems = []
    state = offsets_topic_state(FakeKafka({1: 2, 0: -1}), None, problems)
    assert state == {0: LeaderState(OFFSETS, 0, -1, (), None, None, "metadata"),
                     1: LeaderState(OFFSETS, 1, 2, (1, 2), None, None, "metadata")}
    assert problems == [f"partition {OFFSETS}-0 has no leader"]


def test_leaders_from_zookeeper_only_when_there_is_one():
    kafka = FakeKafka({0: 1})
    zk = FakeZk([PartitionState(OFFSETS, 3, 2, 7, 4, (2, 1), 0)], ["topic 't' has no partitions in ZooKeeper"])
    problems = []
    assert partition_leaders(kafka, zk, [OFFSETS, "t"], problems) == [
        LeaderState(OFFSETS, 3, 2, (2, 1), 7, 4, "zookeeper")]
    assert problems == ["zookeeper: topic 't' has no partitions in ZooKeeper"] and kafka.asked == []
    assert offsets_topic_state(kafka, FakeZk([])) == {}


def test_not_served_uses_the_same_pass_leaders():
    groups = ["a", "b", "c"]
    assert [partition_for(g, 4) for g in groups] == [1, 2, 3]
    rows = {"partition_state": [{"partition": 0, "leader": 1}, {"partition": 1, "leader": 1},
                                {"partition": 2, "leader": 2}, {"partition": 3, "leader": 1}],
            "group_coordinators": [
                {"group": "a", "coordinator_id": 1, "error": None},
                {"group": "b", "coordinator_id": 1, "error": None},  # b's partition is led by 2
                {"group": "c", "coordinator_id": None, "error": "COORDINATOR_NOT_AVAILABLE"},
            ]}
    assert coordinators.not_served(rows, groups) == {"b": "MISMATCH", "c": "UNAVAILABLE"}
    # no __consumer_offsets partition state at all: no leader, nobody is served
    assert coordinators.not_served({"partition_state": [], "group_coordinators": [
        {"group": "a", "coordinator_id": 1, "error": None}]}, ["a"]) == {"a": "UNAVAILABLE"}


def test_collect_until_settled_stops_when_every_group_is_served(monkeypatch):
    answers = iter([{"a": "LOADING"}, {}])
    written, slept, logged = [], [], []

    def fake_collect(cluster, kafka, zk, groups=None, now=None):
        return SimpleNamespace(observed_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), rows={"x": []},
                               problems=[])

    monkeypatch.setattr(coordinators, "groups_to_watch", lambda cluster, kafka, root: ["a", "b"])
    monkeypatch.setattr(coordinators, "collect_coordinators", fake_collect)
    monkeypatch.setattr(coordinators, "write_collection", lambda *a: written.append(a))
    monkeypatch.setattr(coordinators, "not_served", lambda rows, groups: next(answers))
    monkeypatch.setattr(coordinators.time, "sleep", slept.append)
    cluster = SimpleNamespace(name="lab")
    passes = coordinators.collect_until_settled(cluster, None, None, None, settle_seconds=60, interval=5,
                                                log_each=logged.append)
    assert [p["not_ok"] for p in passes] == [1, 0] and passes[0]["examples"] == {"a": "LOADING"}
    assert passes[0]["groups"] == 2 and len(written) == 2 and slept == [5] and logged == passes
