"""Find partitions whose consumer offsets are stuck, and groups caught in rebalance storms.

    PATH=.venv/bin:$PATH spark-submit spark_jobs/stuck_partitions.py --snapshots SNAPSHOTS --out DIR
        [--window 15m] [--as-of 2026-01-01T00:00:00Z] [--lag-growth-ratio 0.05]
        [--offsets-retention 1440m] [--data-root ROOT]

SNAPSHOTS: a JSON Lines file or a folder (e.g. the dataset root) of Parquet / JSON Lines
offsets_snapshots rows. Writes DIR/findings.jsonl (one object per partition in the input) and
DIR/groups.jsonl (one per group) and DIR/series.jsonl (lag over the window of every flagged
partition, for the report's charts); with --data-root also appends them as Parquet datasets
`stuck_findings` and `stuck_groups`. The rules live in fleetkit.stuck.rules (one definition); this job
computes the facts they need per partition (fleetkit.stuck.columnar, numpy over each task's rows)
and applies them. A small input on local paths (up to FLEET_STUCK_INPROCESS_MAX_ROWS rows, 200,000
by default; `--engine`) is judged without starting Spark, by fleetkit.stuck.inprocess: the same
facts, rules and files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spark-submit runs this file as a script
from jobs_common import (  # noqa: E402
    SNAPSHOT_SCHEMA, iso, mark_done, parse_ts, path_join, read_rows, session, write_dataset, write_jsonl,
)

from pyspark.sql import Column, DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from fleetkit.stuck import inprocess  # noqa: E402
from fleetkit.stuck import rules as stuck  # noqa: E402
from fleetkit.stuck import timelag  # noqa: E402
from fleetkit.stuck.columnar import (  # noqa: E402
    CODE_BITS, FACT_INPUT, FACTS_SCHEMA, GROUP_FACTS_SCHEMA, GROUP_ID, GROUP_KEYS, KEYS, TP_KEYS, group_id_column,
    packed_columns, task_facts, task_output_ddl, unpack_points,
)


_VERDICT = T.StructType([T.StructField("status", T.StringType()), T.StructField("reason", T.StringType()),
                         T.StructField("since", T.DoubleType()), T.StructField("confidence", T.StringType()),
                         T.StructField("judged_from", T.DoubleType())])


def _tasks(lo_us: int, hi_us: int):
    """mapInArrow function: a task's rows (every row of a group in the same task) -> task_facts."""
    def run(batches):
        import pyarrow as pa

        batches = list(batches)
        if not batches:
            return
        out = task_facts(pa.Table.from_batches(batches).combine_chunks(), lo_us, hi_us)
        if out is not None:
            yield from out.to_batches()
    return run


GK = GROUP_KEYS


def packed_small_values(vocab: Column) -> list[Column]:
    """fleetkit.stuck.columnar.PACKED of each row (its encoder, beside the decoder)."""
    return packed_columns(F, vocab, stuck.REBALANCING)


def group_id() -> Column:
    """fleetkit.stuck.columnar.group_id of each row's cluster, source and group."""
    return group_id_column(F)


def _vocabulary(words: list[str]):
    return F.array(*[F.lit(w) for w in words]) if words else F.array().cast("array<string>")


def partition_features(snapshots: DataFrame, as_of: dt.datetime, window: dt.timedelta,
                       words: list[str]) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(features, group facts, log end points).

    features: one row per (cluster, group, topic, partition) of the input with the facts of
    fleetkit.stuck.rules.Features over the window (snapshots = 0 when the window has no commit), plus
    `unchanged_since`: when the latest committed offset was first seen (over the whole input up to
    as_of), what offsets.retention counts from when the commit time is unknown.

    group facts: one row per group with a snapshot in the window: what fleetkit.stuck.rules.storm
    reads (times, rebalancing, rebalances, rejoins, cause, assignor). `words`: the distinct rejoin
    causes and assignors of the snapshots (the codes' vocabulary).

    log end points: per topic partition and task, the distinct (observed_at, log end) points up to
    as_of of the task's snapshots of it, packed (columnar.log_end_points): columns TP, points.

    One shuffle: each group's snapshots go to one task, where `task_facts` computes every fact with
    numpy; rows before the window count only as history (the offset before a change, the row
    before the trailing streak), as in rules.features, rows after as_of only name their key."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    lo_us, hi_us = ((t - epoch) // dt.timedelta(microseconds=1) for t in (as_of - window, as_of))
    vocab = _vocabulary(words)
    if len(words) >= 1 << CODE_BITS:
        raise SystemExit(f"{len(words)} distinct rejoin causes and assignors: at most {(1 << CODE_BITS) - 1} are read")
    small = [c for c in FACT_INPUT if c != "assigned"]
    rows = (snapshots
            .select(group_id().alias(GROUP_ID), "topic", "partition", *small, *packed_small_values(vocab))
            .repartition(GROUP_ID))
    # cached: read three times below (the keys' facts, the groups', the log end points)
    out = rows.mapInArrow(_tasks(lo_us, hi_us), task_output_ddl()).cache()
    facts = [c.split(" ")[0] for c in FACTS_SCHEMA.split(", ")]
    agg = (out.filter(F.col("_row") == 0).select(*KEYS, *facts)
           .withColumn("span_seconds", F.col("last_at").cast("double") - F.col("first_at").cast("double")))
    group_cols = [c.split(" ")[0] for c in GROUP_FACTS_SCHEMA.split(", ")]
    # a null code is no word: element_at of a null read from the tasks' Arrow output gave the word at
    # the null slot's leftover value (a group with no assignor was called eager), so nulls are tested
    def word(code: str) -> Column:
        return F.when(F.col(code).isNotNull(), F.element_at(vocab, F.col(code).cast("int")))

    groups = (out.filter(F.col("_row") == 1).select(*GK, *group_cols)
              .withColumn("cause", word("cause_code")).withColumn("assignor", word("assignor_code")))
    points = out.filter(F.col("_row") == 2).select(*TP_KEYS, "points")
    windowed = F.col("snapshots") > 0
    features = (agg
                .withColumn("snapshots", F.coalesce(F.col("snapshots"), F.lit(0)))
                .withColumn("span_seconds", F.when(windowed, F.col("span_seconds")).otherwise(F.lit(0.0)))
                .withColumn("rewound", F.coalesce(F.col("rewound"), F.lit(False)))
                .withColumn("never_moved", F.coalesce(F.col("never_moved"), F.lit(False)))
                .withColumn("lag_never_decreased",
                            F.when(windowed, F.coalesce(F.col("lag_never_decreased"), F.lit(True)))
                            .otherwise(F.lit(False)))
                .withColumn("liveness_known", ~F.col("source").isin(*stuck.NO_LIVENESS_SOURCES))
                .withColumn("as_of", F.lit(as_of.timestamp()))
                .withColumn("streak", F.when(windowed, F.col("streak")).otherwise(F.lit(0)).cast("int")))
    return features, groups, points


def _classifier(window_seconds: float, ratio: float):
    fields = [f.name for f in stuck.Features.__dataclass_fields__.values()]

    @F.udf(returnType=_VERDICT, useArrow=True)
    def classify(*values):
        return tuple(stuck.judge(stuck.Features(*values), window_seconds, ratio))

    return classify, fields


TP = TP_KEYS


TIME_LAG_BUCKETS = 64
_TIME_LAG_SCHEMA = ("cluster string, source string, group string, topic string, partition int, "
                    "lag_seconds double, lag_seconds_kind string, lag_seconds_error double")


def with_time_lag(findings: DataFrame, points: DataFrame, as_of: dt.datetime) -> DataFrame:
    """lag_seconds / lag_seconds_kind / lag_seconds_error (fleetkit.stuck.timelag) of each finding,
    from its partition's log end points (partition_features' third result) and the timestamp of the
    record at the committed offset (`record_ts`, dropped here). Findings and points meet per topic
    partition (cogroup), so a partition's history crosses into Python once, not once per group
    reading it."""
    at = as_of.timestamp()

    def estimates(fs, pts):
        import pandas as pd

        by_tp: dict[tuple, list] = {}
        for c, tpc, p, packed in zip(pts["_p_cluster"].tolist(), pts["_p_topic"].tolist(),
                                     pts["_p_partition"].tolist(), pts["points"].tolist()):
            by_tp.setdefault((c, tpc, p), []).append(packed)
        histories: dict[tuple, timelag.History] = {}

        def num(v, kind):
            return None if v is None or pd.isna(v) else kind(v)

        rows = []
        for r in fs.itertuples(index=False):
            tp = (r.cluster, r.topic, r.partition)
            history = histories.get(tp)
            if history is None:
                history = histories[tp] = timelag.History(unpack_points(by_tp.get(tp, ())), at)
            est = history.estimate(num(r.committed_offset, int), num(r.record_ts, float))
            rows.append((r.cluster, r.source, r.group, r.topic, r.partition, est.seconds, est.kind,
                         est.error_seconds))
        return pd.DataFrame(rows, columns=["cluster", "source", "group", "topic", "partition", "lag_seconds",
                                           "lag_seconds_kind", "lag_seconds_error"])

    # findings and points meet in buckets of topic partitions (pandas costs milliseconds per group:
    # one group per partition would cost more than the estimates); the points' keys are renamed, as
    # both sides come from the same snapshots, which Spark would call ambiguous
    bucket = F.pmod(F.xxhash64(*TP), F.lit(TIME_LAG_BUCKETS))
    asked = findings.select(*KEYS, "committed_offset", "record_ts").withColumn("_b", bucket)
    pts = points.withColumn("_b", bucket).select(F.col("_b").alias("_p_b"),
                                                 *[F.col(c).alias(f"_p_{c}") for c in TP], "points")
    lags = asked.groupBy("_b").cogroup(pts.groupBy("_p_b")).applyInPandas(estimates, _TIME_LAG_SCHEMA)
    order = TP + [c for c in findings.columns if c not in TP and c != "record_ts"] + \
        ["lag_seconds", "lag_seconds_kind", "lag_seconds_error"]
    return findings.join(lags, KEYS, "left").select(*order)


def classify_partitions(features: DataFrame, as_of: dt.datetime, window: dt.timedelta, ratio: float,
                        retention: dt.timedelta) -> DataFrame:
    classify, fields = _classifier(window.total_seconds(), ratio)
    verdict = classify(*[F.col(f) for f in fields])
    out = (features.withColumn("verdict", verdict)
           .select(
               *KEYS,
               F.col("verdict.status").alias("status"),
               (F.col("latest_log_end") - F.col("latest_committed")).alias("lag"),
               F.col("latest_committed").alias("committed_offset"),
               F.col("latest_log_start").alias("log_start_offset"),
               F.col("latest_log_end").alias("log_end_offset"),
               F.col("latest_assigned").alias("assigned"),
               F.lit(as_of - window).alias("window_start"), F.lit(as_of).alias("window_end"),
               F.col("snapshots"),
               F.col("verdict.reason").alias("reason"),
               F.col("unchanged_since"),
               F.col("verdict.confidence").alias("confidence"),
               F.col("record_ts"),
               F.when(F.col("verdict.status").isin("STALLED", "FROZEN"),
                      F.timestamp_seconds(F.col("verdict.since"))).alias("stalled_since"),
               F.when(F.col("verdict.status") == "STOPPED",
                      F.timestamp_seconds(F.col("verdict.since"))).alias("stopped_since"),
               F.timestamp_seconds(F.col("verdict.judged_from")).alias("judged_from"),
           ))
    expires = F.col("unchanged_since") + F.expr(f"INTERVAL {int(retention.total_seconds())} SECONDS")
    return (out
            .withColumn("offset_expires_at", F.when(F.col("status") == "STOPPED", expires))
            .withColumn("expires_in_seconds",
                        F.when(F.col("status") == "STOPPED",
                               F.col("offset_expires_at").cast("long") - F.lit(int(as_of.timestamp())))))


def group_findings(findings: DataFrame, facts: DataFrame) -> DataFrame:
    """One row per group: its findings rolled up, and its rebalance-storm verdict from `facts` (the
    group facts of partition_features)."""
    status_rank = F.array_position(F.array(*[F.lit(s) for s in stuck.GROUP_ORDER]), F.col("status"))
    by_status = findings.groupBy(*GK, "status").agg(F.count(F.lit(1)).alias("n"))
    counts = by_status.groupBy(*GK).agg(
        F.map_from_entries(F.array_sort(F.collect_list(F.struct("status", "n")))).alias("counts"))  # by status
    ranked = (findings.withColumn("rank", status_rank).filter(F.col("rank") > 0)
              .groupBy(*GK).agg(F.min("rank").alias("rank"), F.min("judged_from").alias("judged_from")))
    lag = findings.groupBy(*GK).agg(F.coalesce(F.sum("lag"), F.lit(0)).alias("total_lag"))
    verdict = _storm_udf()(*[F.col(c) for c in ("times", "rebalancing", "rebalances", "rejoins", "cause",
                                                 "assignor")])
    order = F.array(*[F.lit(s) for s in stuck.GROUP_ORDER])
    return (counts.join(lag, GK).join(ranked, GK, "left")
            .join(facts.withColumn("v", verdict), GK, "left")
            .select(*GK,
                    F.coalesce(F.element_at(order, F.col("rank").cast("int")),
                               F.lit("INSUFFICIENT_DATA")).alias("status"),
                    "total_lag", "counts",
                    # a group not judged yet: about when its partitions' history is enough
                    F.when(F.element_at(order, F.col("rank").cast("int")) == "INSUFFICIENT_DATA",
                           F.col("judged_from")).alias("judged_from"),
                    F.coalesce(F.col("v.storm"), F.lit(False)).alias("rebalance_storm"),
                    F.col("v.kind").alias("storm_kind"),
                    F.coalesce(F.col("v.rebalances"), F.lit(0)).alias("rebalances"),
                    F.coalesce(F.col("v.rejoins"), F.lit(0)).alias("rejoins"),
                    F.col("v.group_wide_stop").alias("group_wide_stop"),
                    F.col("v.fix").alias("storm_fix")))


_STORM = T.StructType([T.StructField("storm", T.BooleanType()), T.StructField("kind", T.StringType()),
                       T.StructField("rebalances", T.IntegerType()), T.StructField("rejoins", T.IntegerType()),
                       T.StructField("group_wide_stop", T.BooleanType()), T.StructField("fix", T.StringType())])


def _storm_udf():
    @F.udf(returnType=_STORM)
    def storm(times, rebalancing, rebalances, rejoins, cause, assignor):
        v = stuck.storm_verdict(times or 0, rebalancing or 0, int(rebalances or 0), int(rejoins or 0), cause,
                                assignor)
        return tuple(v)

    return storm


def with_source(snapshots: DataFrame) -> DataFrame:
    """`source` null (files written before the column) read as kafka."""
    return snapshots.withColumn("source", F.coalesce(F.col("source"), F.lit("kafka")))


def evaluate(snapshots: DataFrame, window: dt.timedelta, as_of: dt.datetime | None = None,
             ratio: float = stuck.DEFAULT_LAG_GROWTH_RATIO,
             retention: dt.timedelta = stuck.DEFAULT_OFFSETS_RETENTION) -> tuple[DataFrame, DataFrame, dt.datetime]:
    """The whole job as DataFrame -> (findings, groups, as_of)."""
    snapshots = with_source(snapshots)
    # one scan for the newest snapshot time and the group states' vocabulary
    newest, causes, assignors = snapshots.agg(F.max("observed_at"), F.collect_set("rejoin_cause"),
                                              F.collect_set("assignor")).first()
    words = sorted(set(causes or ()) | set(assignors or ()))
    if as_of is None:
        # no rows (a cluster with no groups yet): judge "now", which yields empty results
        newest = newest or dt.datetime.now(dt.timezone.utc)
        as_of = newest.replace(tzinfo=dt.timezone.utc) if newest.tzinfo is None else newest
    feats, facts, points = partition_features(snapshots, as_of, window, words)
    # cached: the time lag reads the classified partitions twice (its input and the join back), which
    # would run the verdicts twice
    findings = classify_partitions(feats, as_of, window, ratio, retention).cache()
    findings = with_time_lag(findings, points, as_of).cache()
    groups = group_findings(findings, facts)
    return findings, groups, as_of


SERIES_LIMIT = 500


def lag_series(findings: DataFrame, snapshots: DataFrame, as_of: dt.datetime, window: dt.timedelta,
               limit: int = SERIES_LIMIT) -> DataFrame:
    """Lag over the window of the flagged partitions the report charts (the `limit` worst by
    status, then lag; equal ones by key, so the choice is the same on every run)."""
    rank = F.array_position(F.array(*[F.lit(s) for s in stuck.GROUP_ORDER]), F.col("status"))
    flagged = (findings.filter(F.col("status").isin(*stuck.FLAGGED))
               .orderBy(rank, F.col("lag").desc_nulls_last(), *KEYS).limit(limit).select(*KEYS, "status"))
    lo = as_of - window
    # the flagged groups' names first (a set lookup per snapshot row is cheaper than the join's hash
    # of the key), then the join on the few rows left
    names = sorted(r["group"] for r in flagged.select("group").distinct().collect())
    rows = (snapshots.filter((F.col("observed_at") >= F.lit(lo)) & (F.col("observed_at") <= F.lit(as_of))
                             & F.col("group").isin(*names))
            .join(F.broadcast(flagged), KEYS)  # at most `limit` rows: no shuffle, no sort of the snapshots
            .select(*KEYS, "status", "observed_at",
                    (F.col("log_end_offset") - F.col("committed_offset")).alias("lag"),
                    "committed_offset", "log_end_offset"))
    return rows.groupBy(*KEYS, "status").agg(
        F.sort_array(F.collect_list(F.struct(iso(F.col("observed_at")).alias("t"), "lag", "committed_offset",
                                             "log_end_offset"))).alias("points"))


def for_json(findings: DataFrame) -> DataFrame:
    return (findings
            .withColumn("window_start", iso(F.col("window_start")))
            .withColumn("window_end", iso(F.col("window_end")))
            .withColumn("unchanged_since", iso(F.col("unchanged_since")))
            .withColumn("stalled_since", iso(F.col("stalled_since")))
            .withColumn("stopped_since", iso(F.col("stopped_since")))
            .withColumn("judged_from", iso(F.col("judged_from")))
            .withColumn("offset_expires_at", iso(F.col("offset_expires_at"))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--snapshots", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--window", default="15m")
    ap.add_argument("--as-of")
    ap.add_argument("--lag-growth-ratio", type=float, default=stuck.DEFAULT_LAG_GROWTH_RATIO)
    ap.add_argument("--offsets-retention", default="1440m", help="the brokers' offsets.retention.minutes")
    ap.add_argument("--data-root", help="also append the results as Parquet datasets here")
    ap.add_argument("--recent-days", type=int, help="read only date=YYYY-MM-DD folders of the last N days")
    ap.add_argument("--master", help="Spark master when not run by spark-submit (default local[*])")
    ap.add_argument("--engine", choices=("auto", "spark", "in-process"), default="auto",
                    help="auto (default): inputs of up to FLEET_STUCK_INPROCESS_MAX_ROWS rows (200,000) on local "
                         "paths or the data root's object store are judged in this process (fleetkit.stuck.inprocess: the same rules and "
                         "outputs, no Spark start-up), larger ones by Spark")
    args = ap.parse_args(argv)
    try:
        window = stuck.parse_duration(args.window)
        retention = stuck.parse_duration(args.offsets_retention)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if not 0 <= args.lag_growth_ratio <= 1:
        raise SystemExit(f"--lag-growth-ratio {args.lag_growth_ratio} must be between 0 and 1")
    as_of = parse_ts(args.as_of) if args.as_of else None

    t0 = time.monotonic()
    since = None
    if args.recent_days:
        since = (as_of or dt.datetime.now(dt.timezone.utc)).date() - dt.timedelta(days=args.recent_days)
    local_paths = all(inprocess.readable_here(p) for p in (args.snapshots, args.out, args.data_root or ""))
    if args.engine == "in-process" or (args.engine == "auto" and local_paths
                                       and inprocess.small_input(args.snapshots, since)):
        summary = inprocess.run(args.snapshots, args.out, window, as_of, args.lag_growth_ratio, retention,
                                args.data_root, since)
        print(json.dumps(summary), flush=True)
        return 0
    spark = session("stuck_partitions", args.master)
    snapshots = read_rows(spark, args.snapshots, SNAPSHOT_SCHEMA, ("observed_at", "committed_at"), since)
    findings, groups, as_of = evaluate(snapshots, window, as_of, args.lag_growth_ratio, retention)
    out = args.out
    n_find = write_jsonl(for_json(findings), path_join(out, "findings.jsonl"))
    n_groups = write_jsonl(groups.withColumn("judged_from", iso(F.col("judged_from"))), path_join(out, "groups.jsonl"))
    write_jsonl(lag_series(findings, with_source(snapshots), as_of, window), path_join(out, "series.jsonl"))
    if args.data_root:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        write_dataset(findings, args.data_root, "stuck_findings", stamp)
        write_dataset(groups, args.data_root, "stuck_groups", stamp)
    summary = {r["status"]: r["n"] for r in findings.groupBy("status").agg(F.count(F.lit(1)).alias("n")).collect()}
    print(json.dumps({"as_of": as_of.isoformat().replace("+00:00", "Z"), "window_seconds": window.total_seconds(),
                      "partitions": n_find, "groups": n_groups, "statuses": summary,
                      "seconds": round(time.monotonic() - t0, 1), "out": str(out)}), flush=True)
    mark_done(out, spark)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
