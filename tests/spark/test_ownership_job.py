"""The ownership job's transform on a local[2] session: rules parity with fleetkit.ownership.rules, and a
leader change seen through loading, recovery, a stuck load, a mismatch and a leaderless partition."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from fleetkit.ownership import rules as ownership
from tests.helpers import groups_on_partition

pytestmark = pytest.mark.spark

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def naive(minutes: float) -> dt.datetime:
    """Spark hands timestamps back as naive UTC (the session time zone is UTC)."""
    return at(minutes).replace(tzinfo=None)


def test_the_jobs_verdicts_equal_the_rules(spark):
    """The job applies fleetkit.ownership.rules.verdict through a lookup of every input combination
    (verdict_lookup + with_verdicts): every combination must come out as the rule says."""
    from ownership import verdict_lookup, with_verdicts

    errors = [None, "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE",
              "COORDINATOR_UNREACHABLE", "NO_ANSWER", "INVALID_GROUP_ID"]
    cases = list(itertools.product([None, 0, 1], errors, [None, -1, 0, 1]))
    df = spark.createDataFrame(cases, "coordinator_id int, error string, leader int")
    got = with_verdicts(df, verdict_lookup(df, df)).withColumnRenamed("verdict", "v").collect()
    assert len(got) == len(cases)
    for r in got:
        assert r["v"] == ownership.verdict(r["coordinator_id"], r["error"], r["leader"]), r
    # the rule table, spelled out
    assert ownership.verdict(1, None, 1) == "OK"
    assert ownership.verdict(2, None, 1) == "MISMATCH"
    assert ownership.verdict(2, "NOT_COORDINATOR", 1) == "MISMATCH"
    assert ownership.verdict(1, "NOT_COORDINATOR", 1) == "LOADING"
    assert ownership.verdict(1, "COORDINATOR_LOAD_IN_PROGRESS", 1) == "LOADING"
    assert ownership.verdict(None, "COORDINATOR_NOT_AVAILABLE", 1) == "UNAVAILABLE"
    assert ownership.verdict(1, None, -1) == "UNAVAILABLE"
    assert ownership.verdict(1, "COORDINATOR_UNREACHABLE", 1) == "UNAVAILABLE"


def test_partition_verdict_column_equals_the_rules(spark):
    from ownership import partition_verdict_column
    from pyspark.sql import functions as F

    worsts = [None, *ownership.SEVERITY]
    cases = list(itertools.product(worsts, [None, -1, 0, 2], [None, 0, 299, 300, 301, 10_000]))
    df = spark.createDataFrame(cases, "worst string, leader int, waited long")
    got = df.withColumn("v", partition_verdict_column(F.col("worst"), F.col("leader"), F.col("waited"), 300)).collect()
    assert len(got) == len(cases)
    for r in got:
        assert r["v"] == ownership.partition_verdict(r["worst"], r["leader"], r["waited"], 300), r



def test_leader_change_loading_recovery_stuck_mismatch(spark):
    from ownership import CHANGE_SCHEMA, COORDINATOR_SCHEMA, STATE_SCHEMA, evaluate

    n = 4  # __consumer_offsets partitions
    recovering = groups_on_partition(1, n, 3, "rec ü😀 '{i}'")
    stuck = groups_on_partition(2, n, 2, "stk ü😀 '{i}'")
    steady = groups_on_partition(0, n, 2, "ok ü😀 '{i}'")
    orphan = groups_on_partition(3, n, 1, "orph ü😀 '{i}'")
    times = [at(m) for m in (0, 1, 2, 8)]
    states, coords = [], []
    for i, t in enumerate(times):
        leaders = {0: (0, 3), 1: (0, 5) if i == 0 else (1, 6), 2: (2, 7) if i == 0 else (0, 8), 3: (-1, 2)}
        for p, (leader, epoch) in leaders.items():
            states.append(("c", "__consumer_offsets", p, t, leader, [0, 1, 2], epoch, 1, "zookeeper"))
        states.append(("c", "other", 0, t, 2, [2], 0, 1, "zookeeper"))  # not the offsets topic: ignored
        for g in steady:
            coords.append(("c", g, t, 0 if g == steady[0] else 2, None, "Stable", 1))  # steady[1]: MISMATCH
        for g in recovering:
            loading = i == 1
            coords.append(("c", g, t, 0 if i == 0 else 1, "NOT_COORDINATOR" if loading else None,
                           "Unknown" if loading else "Stable", None if loading else 1))
        for g in stuck:
            coords.append(("c", g, t, 2 if i == 0 else 0, None if i == 0 else "NOT_COORDINATOR",
                           "Stable" if i == 0 else "Unknown", 1 if i == 0 else None))
        for g in orphan:
            coords.append(("c", g, t, None, "COORDINATOR_NOT_AVAILABLE", "Unknown", None))
    # what the leader-change watch saw as it happened: partition 1's change, earlier than the next
    # collection saw it (counted once, at the watch's time), and a change of partition 0 between
    # two collections that no collection saw (epoch 2 -> 3 before the first one)
    watched = spark.createDataFrame([("c", 1, at(0.9), 0, 1, 5, 6, [1, 2], "watch"),
                                     ("c", 0, at(-0.5), 1, 0, 2, 3, [0, 1], "watch")], CHANGE_SCHEMA)
    groups, parts, as_of = evaluate(spark.createDataFrame(coords, COORDINATOR_SCHEMA),
                                    spark.createDataFrame(states, STATE_SCHEMA), None, dt.timedelta(hours=1), 300,
                                    watched=watched)
    assert as_of == at(8)
    # the job's outputs are what core/datasets.py declares (columns, order, types)
    from jobs_common import spark_schema

    from fleetkit.core.datasets import FINDINGS

    assert groups.schema.simpleString() == spark_schema(FINDINGS["ownership_groups"]).simpleString()
    assert parts.schema.simpleString() == spark_schema(FINDINGS["ownership_partitions"]).simpleString()
    g = {r["group"]: r for r in groups.collect()}
    assert {x: g[x]["verdict"] for x in steady} == {steady[0]: "OK", steady[1]: "MISMATCH"}
    assert g[steady[1]]["expected_coordinator"] == 0 and g[steady[1]]["coordinator_id"] == 2
    assert all(g[x]["verdict"] == "OK" and g[x]["partition"] == 1 and g[x]["not_ok_since"] is None for x in recovering)
    assert all(g[x]["verdict"] == "LOADING" and g[x]["not_ok_since"] == naive(1) and g[x]["not_ok_seconds"] == 420
               for x in stuck)
    assert g[orphan[0]]["verdict"] == "UNAVAILABLE"

    p = {r["partition"]: r for r in parts.collect()}
    assert set(p) == {0, 1, 2, 3}
    assert p[1]["verdict"] == "OK" and p[1]["changes_in_window"] == 1
    change = p[1]["changes"][0]
    assert (change["at"], change["from_leader"], change["to_leader"], change["from_epoch"], change["to_epoch"]) == \
        (naive(0.9), 0, 1, 5, 6)
    assert p[1]["recovered_at"] == naive(2) and p[1]["recovery_seconds"] == 66
    assert p[2]["verdict"] == "LOAD_STUCK" and p[2]["not_ok_seconds"] == 420 and p[2]["recovered_at"] is None
    assert p[2]["affected_groups"] == sorted(stuck) and p[2]["loading"] == 2
    assert p[0]["verdict"] == "MISMATCH" and p[0]["mismatch"] == 1
    assert [(c["from_leader"], c["to_leader"], c["at"]) for c in p[0]["changes"]] == [(1, 0, naive(-0.5))]
    assert p[3]["verdict"] == "UNAVAILABLE" and p[3]["leader"] == -1

    # the same input with a 10-minute threshold: partition 2 is still loading, not stuck
    _, parts10, _ = evaluate(spark.createDataFrame(coords, COORDINATOR_SCHEMA),
                             spark.createDataFrame(states, STATE_SCHEMA), None, dt.timedelta(hours=1), 600)
    assert {r["partition"]: r["verdict"] for r in parts10.collect()}[2] == "LOADING"


# how each generation answers for a group while its new leader loads the partition (seen on the
# lab's brokers): 0.9 says NOT_COORDINATOR from the leader itself; 3.9 and 4.3 say
# COORDINATOR_LOAD_IN_PROGRESS. 4.3 runs KRaft: leaders come from metadata, with no controller epoch.
LOAD_ANSWERS = {"0.9": ("NOT_COORDINATOR", 1, "zookeeper"), "3.9": ("COORDINATOR_LOAD_IN_PROGRESS", 1, "zookeeper"),
                "4.3": ("COORDINATOR_LOAD_IN_PROGRESS", None, "metadata")}


@pytest.mark.parametrize("generation", list(LOAD_ANSWERS), ids=[f"kafka-{g}" for g in LOAD_ANSWERS])
def test_a_load_stuck_after_a_leader_change_per_generation(spark, generation):
    """Partition 0's leader moves 2 -> 0 at minute 1 and its groups see the generation's load answer
    until minute 8: LOAD_STUCK past 5 minutes; partition 1's group, whose lookup still names the old
    leader after its change (a stale lookup, NOT_COORDINATOR from a broker that is not the leader),
    is MISMATCH, never LOADING."""
    from ownership import COORDINATOR_SCHEMA, STATE_SCHEMA, evaluate

    load_error, controller_epoch, source = LOAD_ANSWERS[generation]
    stuck = groups_on_partition(0, 2, 2, "stk ü😀 '{i}'")
    stale = groups_on_partition(1, 2, 1, "stale {{ x }} '{i}'")
    states, coords = [], []
    for i, t in enumerate(at(m) for m in (0, 1, 2, 8)):
        states.append(("c", "__consumer_offsets", 0, t, 2 if i == 0 else 0, [0, 1, 2], 4 if i == 0 else 5,
                       controller_epoch, source))
        states.append(("c", "__consumer_offsets", 1, t, 1 if i < 3 else 2, [0, 1, 2], 7 if i < 3 else 8,
                       controller_epoch, source))
        for g in stuck:
            coords.append(("c", g, t, 2 if i == 0 else 0, None if i == 0 else load_error,
                           "Stable" if i == 0 else "Unknown", 1 if i == 0 else None))
        for g in stale:
            coords.append(("c", g, t, 1, None if i < 3 else "NOT_COORDINATOR", "Stable" if i < 3 else "Unknown",
                           1 if i < 3 else None))
    groups, parts, _ = evaluate(spark.createDataFrame(coords, COORDINATOR_SCHEMA),
                                spark.createDataFrame(states, STATE_SCHEMA), None, dt.timedelta(hours=1), 300)
    g = {r["group"]: r for r in groups.collect()}
    assert all((g[x]["verdict"], g[x]["error"], g[x]["not_ok_seconds"]) == ("LOADING", load_error, 420) for x in stuck)
    assert (g[stale[0]]["verdict"], g[stale[0]]["expected_coordinator"], g[stale[0]]["coordinator_id"]) == \
        ("MISMATCH", 2, 1)
    p = {r["partition"]: r for r in parts.collect()}
    assert (p[0]["verdict"], p[0]["leader"], p[0]["leader_epoch"], p[0]["loading"]) == ("LOAD_STUCK", 0, 5, 2)
    assert p[0]["affected_groups"] == sorted(stuck)
    assert p[1]["verdict"] == "MISMATCH" and p[1]["mismatch"] == 1
