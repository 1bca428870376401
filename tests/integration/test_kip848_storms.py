"""Rebalance storms of KIP-848 consumer groups (group.protocol=consumer) on the Kafka 4 lab, with
real consumers side by side: one restarted again and again beside a steady one, one whose
processing of a poll's records outlasts max.poll.interval.ms beside a fast one, and a steady group.
Collections every 10 s; the storm verdict reads the group epoch and the departures counter the
collection takes from ConsumerGroupDescribe (collection.rebalances.consumer_group_counters), in the
reference (fleetkit.stuck.rules.storm) and in the in-process engine (the Spark job's columnar
facts): the churning groups are flagged member_churn with the KIP-848 fix, the steady one never."""

from __future__ import annotations

import datetime as dt

import pytest

from fleetkit.clients.kafka import client_config
from fleetkit.stuck import inprocess
from fleetkit.stuck import rules as stuck

from tests.integration.fleet_clusters import GENERATIONS, Target
from tests.integration.test_rebalance_storms import collected_storms, producing, restarting, slow, steady

pytestmark = pytest.mark.lab

SNAPSHOTS, INTERVAL = 7, 10.0


def kip848_consumer(t: Target, group: str, client_id: str, **extra):
    """A consumer of the consumer group protocol: the broker assigns, so the classic settings
    (session.timeout.ms, heartbeat.interval.ms, partition.assignment.strategy) are not given."""
    from confluent_kafka import Consumer

    return Consumer(client_config({"bootstrap.servers": t.bootstrap, "group.id": group, "group.protocol": "consumer",
                                   "client.id": client_id, "enable.auto.commit": True,
                                   "auto.commit.interval.ms": 1000, "auto.offset.reset": "earliest",
                                   **t.admin_login, **extra}, t.version))


@pytest.mark.parametrize("generation", ["4.3"], ids=["kafka-4.3"])
def test_kip848_member_churn_flagged_steady_group_never(generation, lab_fleet, data_root, unique):
    t = Target(lab_fleet(GENERATIONS[generation]))
    topic = unique("kip848-storm-input")
    t.wait_topic(topic)
    groups = {"restart": unique("kip848 restart 'g'"), "slow": unique("kip848 slow $(g)"),
              "steady": unique("kip848 steady ĝ")}
    loops = [
        producing(t, topic),
        steady(t, groups["restart"], topic, "stayer", make=kip848_consumer),
        restarting(t, groups["restart"], topic, "restarter", make=kip848_consumer),
        steady(t, groups["slow"], topic, "fast-worker", make=kip848_consumer),
        slow(t, groups["slow"], topic, make=kip848_consumer),
        steady(t, groups["steady"], topic, "worker-1", make=kip848_consumer),
        steady(t, groups["steady"], topic, "worker-2", make=kip848_consumer),
    ]
    table, by_group, verdicts, summary = collected_storms(t, loops, groups, data_root, SNAPSHOTS, INTERVAL)
    for k, rs in by_group.items():
        assert rs, k
        assert {r["group_type"] for r in rs} == {"consumer"}, k
        assert all(r["assignor"].startswith("consumer:") and r["generation"] is not None for r in rs), k

    for k in ("restart", "slow"):
        v = verdicts[k]
        assert (v.storm, v.kind, v.group_wide_stop) == (True, "member_churn", False), summary
        assert v.rejoins >= stuck.STORM_MIN_REJOINS and "max.poll.interval.ms" in v.fix and "group.instance.id" in v.fix
    # no member left: never a storm, whatever the joins when it formed
    assert (verdicts["steady"].storm, verdicts["steady"].rejoins) == (False, 0), summary

    # the engine the scheduled run uses (the Spark job computes the same columnar facts)
    _, judged, _ = inprocess.evaluate(table, dt.timedelta(minutes=15))
    engine = {r["group"]: r for r in judged.to_pylist() if r["group"] in groups.values()}
    for k in ("restart", "slow", "steady"):
        g = engine[groups[k]]
        assert (g["rebalance_storm"], g["storm_kind"], g["rebalances"], g["rejoins"], g["group_wide_stop"],
                g["storm_fix"]) == (verdicts[k].storm, verdicts[k].kind, verdicts[k].rebalances, verdicts[k].rejoins,
                                    verdicts[k].group_wide_stop, verdicts[k].fix), (k, g, summary)
