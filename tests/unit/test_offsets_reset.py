"""The offset reset's stages without a cluster: plan (fleetkit.stuck.plan), preconditions and
execution (fleetkit.stuck.execute), read-back (fleetkit.stuck.verify), and the Action wiring."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fleetkit.clients.kafka import GroupDescription, Member, Metadata, PartitionMeta
from fleetkit.core.action import ClusterContext
from fleetkit.stuck import action, execute, plan, verify
from fleetkit.stuck.plan import ResetError


class FakeKafka:
    """A topic 't' with two partitions, log [5, 100) and [0, 50), and one group 'g'."""

    name = "lab"
    asks_api_versions = False  # a 0.9 cluster: the reset commits (stuck.execute.mechanism_for)

    def __init__(self, committed=None, state="Empty", members=()):
        self.committed = dict(committed if committed is not None else {("t", 0): 41, ("t", 1): 50})
        self.state, self.members = state, tuple(members)
        self.commits = []

    def metadata(self, topics=None):
        md = Metadata(brokers={1: "b1:9092"}, controller_id=1)
        for p in (0, 1):
            md.partitions[("t", p)] = PartitionMeta("t", p, 1, (1,), (1,))
        return md

    def group_offsets(self, group, tps):
        return {tp: self.committed.get(tp) for tp in tps}

    def log_offsets(self, tps):
        logs = {("t", 0): (5, 100, None), ("t", 1): (0, 50, None)}
        return {tp: logs[tp] for tp in tps}

    def describe_groups(self, groups):
        return {g: GroupDescription(g, self.state, 1, self.members) for g in groups}

    def commit_offsets(self, group, offsets):
        self.commits.append((group, dict(offsets)))
        self.committed.update(offsets)


def test_plan_skip_one_record():
    p = plan.build_plan(FakeKafka(), "lab", "g", "t", "0", "skip 1")
    assert p["action"] == "reset_offsets" and p["title"] == "Reset offsets of group g on t (skip 1)"
    assert p["changes"] == [{"target": "t-0", "before": 41, "after": 42}]
    assert p["details"]["partitions"] == [{"partition": 0, "committed": 41, "log_start": 5, "log_end": 100,
                                           "new": 42, "lag_before": 59, "lag_after": 58}]
    assert p["rollback"]["conf"]["offsets"] == {"0": 41} and p["rollback"]["dag_id"] == "runbook_stuck_reset"
    assert action._reset_table(p)["rows"] == [[0, 41, 5, 100, 42, 59, 58]]


def test_plan_refuses_unknown_partitions_and_topics():
    with pytest.raises(ResetError, match=r"has no partition\(s\) \[7\]"):
        plan.build_plan(FakeKafka(), "lab", "g", "t", "0,7", "latest")
    with pytest.raises(ResetError, match="a group and a topic are required"):
        plan.build_plan(FakeKafka(), "lab", "", "t", "all", "latest")


def test_restore_without_partitions_restores_the_listed_ones():
    p = plan.build_plan(FakeKafka(), "lab", "g", "t", "all", "restore", {"1": 10})
    assert [(r["partition"], r["new"]) for r in p["details"]["partitions"]] == [(1, 10)]


def test_preconditions_execute_verify():
    kafka = FakeKafka()
    p = plan.build_plan(kafka, "lab", "g", "t", "all", "latest")
    assert execute.check_preconditions(kafka, p) == []
    assert verify.verify(kafka, p) == ["t-0: expected 100, reads back 41"]
    res = execute.execute(kafka, p)
    assert kafka.commits == [("g", {("t", 0): 100, ("t", 1): 50})]
    assert res["changes"] == [{"partition": 0, "before": 41, "after": 100}, {"partition": 1, "before": 50, "after": 50}]
    assert verify.verify(kafka, p) == []


def test_preconditions_name_live_members_and_moved_offsets():
    kafka = FakeKafka()
    p = plan.build_plan(kafka, "lab", "g", "t", "0", "skip 1")
    kafka.state, kafka.members = "Stable", (Member("m1", "app-1", "/10.0.0.1", ()),)
    kafka.committed[("t", 0)] = 43
    assert execute.check_preconditions(kafka, p) == [
        "group 'g' is Stable with 1 live member(s) (clients: app-1); it must be Empty or Dead",
        "committed offset of t-0 changed since the plan: 41 -> 43",
    ]


def test_actions_wire_the_stages():
    kafka = FakeKafka()
    ctx = ClusterContext(cluster=SimpleNamespace(name="lab"), kafka=kafka, zk=None)
    p = action.RESET_OFFSETS.plan(ctx, {"group": "g", "topic": "t", "partitions": "0", "target": "offset 60"})
    assert action.RESET_OFFSETS.check(ctx, p) == []
    action.RESET_OFFSETS.execute(ctx, p)
    assert action.RESET_OFFSETS.verify(ctx, p, None) == []
    assert action.STUCK_SKIP.check is action.RESET_OFFSETS.check and action.STUCK_SKIP.name == "skip_poison_records"
