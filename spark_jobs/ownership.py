"""Group-coordinator ownership: per group and per __consumer_offsets partition, over a window.

    PATH=.venv/bin:$PATH spark-submit spark_jobs/ownership.py --data-root ROOT --out DIR
        [--window 1h] [--as-of 2026-01-01T00:00:00Z] [--load-stuck 5m] [--health HEALTH.jsonl]
        [--cluster NAME]

Reads the datasets group_coordinators and partition_state (topic __consumer_offsets) under ROOT,
joins every observation of a group with the leader of its partition at the same instant (the
partition computed as Kafka does: fleetkit.core.partitioning, vectorised) and writes

* DIR/groups.jsonl, one object per group: its partition, the expected coordinator (the leader),
  the coordinator the cluster named and what it answered, the verdict (OK, MISMATCH, LOADING,
  UNAVAILABLE: fleetkit.ownership.rules.verdict, called per observation), and since when it has
  not been OK;
* DIR/partitions.jsonl, one object per partition: leader, ISR and epoch now, the leader-epoch
  changes in the window, the groups hashed onto it by verdict and the affected ones, how long they
  have been LOADING / UNAVAILABLE since the last change, when they recovered, the partition's size
  and health (with --health, the trim_health job's health.jsonl) and its verdict, LOAD_STUCK
  past the threshold (fleetkit.ownership.rules.partition_verdict).

The rules are only in fleetkit.ownership.rules: this job computes the facts they need and calls them
through pandas UDFs (once per distinct combination of facts in an Arrow batch).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spark-submit runs this file as a script
from jobs_common import conform, iso, mark_done, parse_ts, read_rows, session, spark_schema, write_jsonl  # noqa: E402

from pyspark.sql import Column, DataFrame, Window  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from fleetkit.core.datasets import FINDINGS  # noqa: E402
from fleetkit.ownership import rules as ownership  # noqa: E402
from fleetkit.collection.offsets_topic import OFFSETS_TOPIC  # noqa: E402
from fleetkit.stuck.rules import parse_duration  # noqa: E402

COORDINATOR_SCHEMA = spark_schema("group_coordinators")
STATE_SCHEMA = spark_schema("partition_state")
AFFECTED_LIMIT = 50


@F.pandas_udf(T.IntegerType())
def group_partition(groups, counts):
    """fleetkit.core.partitioning.partitions_for over an Arrow batch (one numpy pass per partition count)."""
    import numpy as np
    import pandas as pd

    from fleetkit.core.partitioning import partitions_for

    out = np.zeros(len(groups), dtype=np.int32)
    for n in counts.unique():
        mask = (counts == n).to_numpy()
        out[mask] = partitions_for(groups[mask].tolist(), int(n))
    return pd.Series(out)


def rule_udf(rule):
    """A pandas UDF (string result) that calls `rule(*values)` for every row, once per distinct
    combination of the values in an Arrow batch (nulls as None, numbers as int): a verdict depends on
    a few small values, so a batch of 10,000 observations has a handful of distinct ones.

    Everything the UDF needs is inside it or in fleetkit, so the Python workers import nothing of
    this file (it runs as a script under spark-submit, as a module in the tests)."""

    @F.pandas_udf(T.StringType())
    def call(*columns):
        import numpy as np
        import pandas as pd

        key = np.zeros(len(columns[0]), dtype=np.int64)
        for col in columns:
            codes, uniques = pd.factorize(col)  # a null: -1
            key = key * (len(uniques) + 1) + (codes + 1)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)

        def value(v):
            if v is None or (not isinstance(v, str) and pd.isna(v)):
                return None
            return int(v) if isinstance(v, (int, float, np.integer, np.floating)) else v

        answers = np.array([rule(*(value(col.iat[i]) for col in columns)) for i in first], dtype=object)
        return pd.Series(answers[inverse.reshape(-1)], index=columns[0].index)

    return call


def partition_verdict_column(groups_worst: Column, leader: Column, waiting_seconds: Column,
                             load_stuck_seconds: int) -> Column:
    """fleetkit.ownership.rules.partition_verdict of every row."""
    rule = functools.partial(ownership.partition_verdict, load_stuck_seconds=load_stuck_seconds)
    return rule_udf(rule)(groups_worst, leader, waiting_seconds)


def severity_column(verdict: Column) -> Column:
    """A verdict's index in fleetkit.ownership.rules.SEVERITY (worst first), as a small int."""
    expr = F.lit(len(ownership.SEVERITY))
    for i, v in reversed(list(enumerate(ownership.SEVERITY))):
        expr = F.when(verdict == v, F.lit(i)).otherwise(expr)
    return expr


def severity_name(severity: Column) -> Column:
    """The verdict of a severity index (null for null)."""
    verdict = F.lit(None).cast("string")
    for i, name in reversed(list(enumerate(ownership.SEVERITY))):
        verdict = F.when(severity == i, F.lit(name)).otherwise(verdict)
    return verdict


def offsets_states(states: DataFrame) -> DataFrame:
    return (states.filter(F.col("topic") == OFFSETS_TOPIC)
            .select("cluster", "observed_at", "partition", "leader", "isr", "leader_epoch"))


def observations(coordinators: DataFrame, states: DataFrame) -> DataFrame:
    """Every group observation with its partition, that partition's leader then, and the verdict."""
    counts = states.groupBy("cluster").agg((F.max("partition") + 1).alias("partitions"))
    groups = (coordinators.select("cluster", "group").distinct()
              .join(F.broadcast(counts), "cluster")
              .withColumn("partition", group_partition(F.col("group"), F.col("partitions")))
              .drop("partitions"))
    joined = (coordinators.join(F.broadcast(groups), ["cluster", "group"])
              .join(F.broadcast(states), ["cluster", "observed_at", "partition"], "left"))
    return with_verdicts(joined, verdict_lookup(coordinators, states))


_NULL_INT, _NULL_STR = -(2**31), "\u0000null"


def _lookup_keys(df: DataFrame) -> DataFrame:
    """Null-safe equi-join keys of the verdict's inputs."""
    return (df.withColumn("_kc", F.coalesce(F.col("coordinator_id"), F.lit(_NULL_INT)))
              .withColumn("_ke", F.coalesce(F.col("error"), F.lit(_NULL_STR)))
              .withColumn("_kl", F.coalesce(F.col("leader"), F.lit(_NULL_INT))))


def verdict_lookup(coordinators: DataFrame, states: DataFrame) -> DataFrame:
    """fleetkit.ownership.rules.verdict of every (coordinator_id, error, leader) the observations can
    hold: each (coordinator, error) pair the coordinators report, with each leader the partition
    states hold and with no leader (an observation without a state). The rule runs once per
    combination on the driver (brokers x errors x leaders: a few hundred at most), so 28.8M
    observations cost a broadcast join, not a Python call each."""
    spark = coordinators.sparkSession
    pairs = [(r[0], r[1]) for r in coordinators.select("coordinator_id", "error").distinct().collect()]
    leaders = {r[0] for r in states.select("leader").distinct().collect()} | {None}
    rows = [(c, e, ld, ownership.verdict(c, e, ld)) for c, e in pairs for ld in sorted(leaders, key=lambda x: (x is None, x))]
    schema = T.StructType([T.StructField("coordinator_id", T.IntegerType()), T.StructField("error", T.StringType()),
                           T.StructField("leader", T.IntegerType()), T.StructField("verdict", T.StringType())])
    return spark.createDataFrame(rows, schema)


def with_verdicts(observed: DataFrame, lookup: DataFrame) -> DataFrame:
    """`observed` with the verdict of its (coordinator_id, error, leader) from `lookup`."""
    keys = ["_kc", "_ke", "_kl"]
    table = _lookup_keys(lookup).select(*keys, "verdict")
    return _lookup_keys(observed).join(F.broadcast(table), keys, "left").drop(*keys)


def _code(col: Column, names: tuple[str, ...]) -> Column:
    """A string column as a small int (index in `names`, -1 for any other non-null value), so the
    per-group aggregation keeps fixed-width buffers and runs as a hash aggregation."""
    expr = F.when(col.isNull(), F.lit(None).cast("int")).otherwise(F.lit(-1))
    for i, n in reversed(list(enumerate(names))):
        expr = F.when(col == n, F.lit(i)).otherwise(expr)
    return expr


def _name(code: Column, names: tuple[str, ...], other: str) -> Column:
    expr = F.when(code.isNull(), F.lit(None).cast("string")).otherwise(F.lit(other))
    for i, n in reversed(list(enumerate(names))):
        expr = F.when(code == i, F.lit(n)).otherwise(expr)
    return expr


ERROR_NAMES = tuple(dict.fromkeys(
    (ownership.LOAD_IN_PROGRESS, ownership.NOT_COORDINATOR, *ownership.UNAVAILABLE_ERRORS, "INVALID_GROUP_ID",
     "GROUP_AUTHORIZATION_FAILED", "UNKNOWN_SERVER_ERROR", "REQUEST_TIMED_OUT", "_TIMED_OUT", "_TRANSPORT")))
from fleetkit.core.kafka_names import GROUP_STATES as STATE_NAMES  # noqa: E402


def per_group(obs: DataFrame, snapshot_times: DataFrame) -> DataFrame:
    """One row per group: its latest observation and since when it has not been OK.

    Only fixed-width aggregates (max, min, max_by of ints), so Spark hash-aggregates 28.8M rows
    without sorting them. `not_ok_since` is the first collection after the group's last OK one
    (exact when the group is seen in every collection); `ok_again_at` the first collection after
    its last not-OK one."""
    ts, ok = F.col("observed_at"), F.col("verdict") == ownership.OK
    latest = lambda c: F.max_by(c, ts)  # noqa: E731
    agg = (obs.withColumn("sev", severity_column(F.col("verdict")))
           .withColumn("err", _code(F.col("error"), ERROR_NAMES))
           .withColumn("st", _code(F.col("state"), STATE_NAMES))
           .groupBy("cluster", "group").agg(
               F.max(ts).alias("observed_at"), F.max("partition").alias("partition"),
               latest(F.col("sev")).alias("sev"), latest(F.col("coordinator_id")).alias("coordinator_id"),
               latest(F.col("leader")).alias("expected_coordinator"), latest(F.col("err")).alias("err"),
               latest(F.col("st")).alias("st"), latest(F.col("members")).alias("members"),
               latest(F.col("leader_epoch")).alias("leader_epoch"),
               F.max(F.when(ok, ts)).alias("last_ok_at"), F.min(F.when(~ok, ts)).alias("first_bad_at"),
               F.max(F.when(~ok, ts)).alias("last_bad_at"),
               F.count(F.lit(1)).alias("observations"), F.sum(F.when(ok, 0).otherwise(1)).alias("not_ok_observations")))
    agg = (agg.withColumn("verdict", severity_name(F.col("sev")))
           .withColumn("error", _name(F.col("err"), ERROR_NAMES, "OTHER_ERROR"))
           .withColumn("state", _name(F.col("st"), STATE_NAMES, "Unknown"))
           .cache())  # one row per group, read twice below: aggregate the observations once
    # the few groups that were ever not OK: the collection after their last OK / last not-OK one
    times = F.broadcast(snapshot_times.withColumnRenamed("observed_at", "t"))
    touched = agg.filter(F.col("last_bad_at").isNotNull()).select("cluster", "group", "last_ok_at", "last_bad_at")
    after = (touched.join(times, "cluster")
             .groupBy("cluster", "group").agg(
                 F.min(F.when(F.col("last_ok_at").isNotNull() & (F.col("t") > F.col("last_ok_at")), F.col("t")))
                 .alias("after_last_ok"),
                 F.min(F.when(F.col("t") > F.col("last_bad_at"), F.col("t"))).alias("ok_again_at")))
    out = agg.join(after, ["cluster", "group"], "left")
    since = F.when(F.col("verdict") != ownership.OK,
                   F.when(F.col("last_ok_at").isNull(), F.col("first_bad_at")).otherwise(F.col("after_last_ok")))
    return (out.withColumn("not_ok_since", since)
            .select("cluster", "group", "partition", "verdict", "observed_at", "expected_coordinator",
                    "coordinator_id", "error", "state", "members", "leader_epoch", "not_ok_since",
                    (F.unix_timestamp("observed_at") - F.unix_timestamp("not_ok_since")).alias("not_ok_seconds"),
                    "last_ok_at", "last_bad_at", "ok_again_at", "observations", "not_ok_observations"))


CHANGE_SCHEMA = spark_schema("leader_changes")


CHANGE_STRUCT = T.StructType([
    T.StructField("at", T.TimestampType()), T.StructField("from_leader", T.IntegerType()),
    T.StructField("to_leader", T.IntegerType()), T.StructField("from_epoch", T.IntegerType()),
    T.StructField("to_epoch", T.IntegerType()), T.StructField("isr", T.ArrayType(T.IntegerType())),
])


def leader_history(states: DataFrame, watched: DataFrame | None = None) -> DataFrame:
    """Per partition: its state at the latest observation and its leader changes: those the
    leader-change watch saw as they happened (`watched`, dataset leader_changes) and those between
    consecutive collections (the leader epoch, or where it is unknown the leader, differs from the
    previous observation's). One change seen both ways counts once, at its earliest time."""
    w = Window.partitionBy("cluster", "partition").orderBy("observed_at")
    marked = (states.withColumn("from_epoch", F.lag("leader_epoch").over(w))
              .withColumn("from_leader", F.lag("leader").over(w))
              .withColumn("first", F.row_number().over(w) == 1))
    changed = ~F.col("first") & (F.coalesce(F.col("leader_epoch") != F.col("from_epoch"), F.lit(False))
                                 | (F.col("leader_epoch").isNull() & (F.col("leader") != F.col("from_leader"))))
    cols = ["cluster", "partition", "at", "from_leader", "to_leader", "from_epoch", "to_epoch", "isr"]
    changes = (marked.filter(changed)
               .select("cluster", "partition", F.col("observed_at").alias("at"), "from_leader",
                       F.col("leader").alias("to_leader"), "from_epoch", F.col("leader_epoch").alias("to_epoch"), "isr"))
    if watched is not None:
        changes = changes.unionByName(watched.select(*[F.col("observed_at").alias("at") if c == "at" else c
                                                       for c in cols]))
    change = F.struct(*[F.col(c) for c in cols[2:]])
    changes = (changes.groupBy("cluster", "partition", F.coalesce(F.col("to_epoch"), F.lit(-1)).alias("k"), "to_leader")
               .agg(F.min_by(change, F.col("at")).alias("c"))
               .groupBy("cluster", "partition")
               .agg(F.array_sort(F.collect_list("c")).alias("changes"), F.max("c.at").alias("last_change_at")))
    now = states.groupBy("cluster", "partition").agg(
        F.max_by(F.struct("observed_at", "leader", "isr", "leader_epoch"), "observed_at").alias("now"))
    return (now.join(changes, ["cluster", "partition"], "left")
            .select("cluster", "partition", F.col("now.observed_at").alias("observed_at"),
                    F.col("now.leader").alias("leader"), F.col("now.isr").alias("isr"),
                    F.col("now.leader_epoch").alias("leader_epoch"),
                    F.coalesce(F.col("changes"), F.array().cast(T.ArrayType(CHANGE_STRUCT))).alias("changes"),
                    "last_change_at"))




def per_partition(groups: DataFrame, states: DataFrame, load_stuck_seconds: int,
                  health: DataFrame | None = None, watched: DataFrame | None = None) -> DataFrame:
    hist = leader_history(states, watched)
    v = F.col("verdict")
    stats = groups.groupBy("cluster", "partition").agg(
        F.count(F.lit(1)).alias("groups"),
        *[F.sum(F.when(v == name, 1).otherwise(0)).alias(name.lower())
          for name in (ownership.OK, ownership.MISMATCH, ownership.LOADING, ownership.UNAVAILABLE)],
        F.min(severity_column(v)).alias("severity"),
        F.slice(F.array_sort(F.collect_list(F.when(v != ownership.OK, F.col("group")))), 1, AFFECTED_LIMIT)
        .alias("affected_groups"),
        F.min("not_ok_since").alias("not_ok_since"))
    # recovered: every group OK now; at the latest of the change and the moment the last group
    # disturbed after it was seen OK again
    recovery = (groups.join(hist.select("cluster", "partition", "last_change_at"), ["cluster", "partition"])
                .groupBy("cluster", "partition").agg(
                    F.max(F.when(F.col("last_bad_at") >= F.col("last_change_at"),
                                 F.coalesce(F.col("ok_again_at"), F.lit(None)))).alias("last_recovery"),
                    F.max((F.col("last_bad_at") >= F.col("last_change_at")).cast("int")).alias("disturbed_after_change"),
                    F.min(F.when(F.col("verdict") == ownership.OK, 1).otherwise(0)).alias("all_ok_now")))
    out = (hist.join(stats, ["cluster", "partition"], "left").join(recovery, ["cluster", "partition"], "left")
           .fillna({"groups": 0, "ok": 0, "mismatch": 0, "loading": 0, "unavailable": 0}))
    # how long the groups have been waiting: since the last leader change, or since they stopped being OK
    start = F.coalesce(F.col("last_change_at"), F.col("not_ok_since"))
    waited = F.unix_timestamp("observed_at") - F.unix_timestamp(start)
    verdict = partition_verdict_column(severity_name(F.col("severity")), F.col("leader"), waited, load_stuck_seconds)
    out = (out.withColumn("verdict", verdict)
           .withColumn("not_ok_seconds", F.when(F.col("verdict").isin(*ownership.WAITING, ownership.LOAD_STUCK), waited))
           .withColumn("recovered_at", F.when(F.col("last_change_at").isNotNull()
                                              & (F.coalesce(F.col("all_ok_now"), F.lit(1)) == 1),
                                              F.greatest(F.col("last_change_at"), F.col("last_recovery"))))
           .withColumn("recovery_seconds", F.unix_timestamp("recovered_at") - F.unix_timestamp("last_change_at"))
           .withColumn("changes_in_window", F.size("changes")))
    if health is not None:
        h = health.select("cluster", "partition", F.col("broker").alias("leader"),
                          F.col("disk_bytes").alias("size_bytes"), F.col("verdict").alias("health"),
                          F.col("records").alias("records"))
        out = out.join(h, ["cluster", "partition", "leader"], "left")
    else:
        out = (out.withColumn("size_bytes", F.lit(None).cast("long")).withColumn("health", F.lit(None).cast("string"))
               .withColumn("records", F.lit(None).cast("long")))
    return out.select("cluster", "partition", "verdict", "leader", "isr", "leader_epoch", "observed_at",
                      "changes_in_window", "changes", "last_change_at", "groups", "ok", "mismatch", "loading",
                      "unavailable", "affected_groups", "not_ok_since", "not_ok_seconds", "recovered_at",
                      "recovery_seconds", "size_bytes", "records", "health")


def evaluate(coordinators: DataFrame, states: DataFrame, as_of: dt.datetime | None, window: dt.timedelta,
             load_stuck_seconds: int, health: DataFrame | None = None,
             watched: DataFrame | None = None) -> tuple[DataFrame, DataFrame, dt.datetime]:
    """(groups, partitions, as_of): the pure transform behind the job."""
    states = offsets_states(states)
    if as_of is None:
        as_of = coordinators.agg(F.max("observed_at")).first()[0] or dt.datetime.now(dt.timezone.utc)
        if as_of.tzinfo is None:
            as_of = as_of.replace(tzinfo=dt.timezone.utc)
    lo, ts = as_of - window, F.col("observed_at")
    coordinators = coordinators.filter((ts >= F.lit(lo)) & (ts <= F.lit(as_of)))
    states = states.filter((ts >= F.lit(lo)) & (ts <= F.lit(as_of)))
    if watched is not None:
        watched = watched.filter((ts >= F.lit(lo)) & (ts <= F.lit(as_of)))
    obs = observations(coordinators, states)
    groups = per_group(obs, states.select("cluster", "observed_at").distinct())
    partitions = per_partition(groups, states, load_stuck_seconds, health, watched)
    return (conform(groups, FINDINGS["ownership_groups"]), conform(partitions, FINDINGS["ownership_partitions"]),
            as_of)


def for_json(df: DataFrame) -> DataFrame:
    """Timestamps as ISO-8601 Z strings."""
    cols = []
    for f in df.schema.fields:
        if isinstance(f.dataType, T.TimestampType):
            cols.append(iso(F.col(f.name)).alias(f.name))
        elif f.name == "changes":
            cols.append(F.transform(f.name, lambda c: c.withField("at", iso(c["at"]))).alias(f.name))
        else:
            cols.append(F.col(f.name))
    return df.select(*cols)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--window", default="1h")
    ap.add_argument("--as-of")
    ap.add_argument("--load-stuck", default=f"{ownership.DEFAULT_LOAD_STUCK_SECONDS}s",
                    help="a partition whose groups are LOADING/UNAVAILABLE this long after a leader change is LOAD_STUCK")
    ap.add_argument("--health", help="health.jsonl of the trim_health job (size and health per partition)")
    ap.add_argument("--cluster", help="only this cluster")
    ap.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    args = ap.parse_args(argv)
    try:
        window, stuck = parse_duration(args.window), parse_duration(args.load_stuck)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    as_of = parse_ts(args.as_of) if args.as_of else None
    t0 = time.monotonic()
    spark = session("ownership", args.master)
    since = ((as_of or dt.datetime.now(dt.timezone.utc)) - window).date()
    from jobs_common import data_files, is_file, path_exists, path_join

    root = args.data_root
    coordinators = read_rows(spark, path_join(root, "group_coordinators"), COORDINATOR_SCHEMA, ("observed_at",), since)
    states = read_rows(spark, path_join(root, "partition_state"), STATE_SCHEMA, ("observed_at",), since)
    if args.cluster:
        coordinators = coordinators.filter(F.col("cluster") == args.cluster)
        states = states.filter(F.col("cluster") == args.cluster)
    watched = None
    changes = path_join(root, "leader_changes")
    if path_exists(changes) and not is_file(changes):
        if any(data_files(changes, since)):
            watched = read_rows(spark, changes, CHANGE_SCHEMA, ("observed_at",), since)
            if args.cluster:
                watched = watched.filter(F.col("cluster") == args.cluster)
    health = None
    if args.health and is_file(args.health):
        health = spark.read.json(args.health)
    groups, partitions, as_of = evaluate(coordinators, states, as_of, window, int(stuck.total_seconds()), health,
                                         watched)
    out = args.out
    groups = groups.cache()
    n_groups = write_jsonl(for_json(groups), path_join(out, "groups.jsonl"))
    n_parts = write_jsonl(for_json(partitions), path_join(out, "partitions.jsonl"))
    verdicts = {r["verdict"]: r["n"] for r in groups.groupBy("verdict").agg(F.count(F.lit(1)).alias("n")).collect()}
    print(json.dumps({"as_of": as_of.isoformat().replace("+00:00", "Z"), "window_seconds": window.total_seconds(),
                      "groups": n_groups, "partitions": n_parts, "verdicts": verdicts,
                      "seconds": round(time.monotonic() - t0, 1), "out": str(out)}), flush=True)
    mark_done(out, spark)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
