"""Find partitions whose consumer offsets are stuck, and groups caught in rebalance storms.

    PATH=.venv/bin:$PATH spark-submit spark_jobs/stuck.py --snapshots SNAPSHOTS --out DIR
        [--window 15m] [--as-of 2026-01-01T00:00:00Z] [--lag-growth-ratio 0.05]
        [--offsets-retention 1440m] [--data-root ROOT]

SNAPSHOTS: a JSON Lines file or a folder (e.g. the dataset root) of Parquet / JSON Lines
offsets_snapshots rows. Writes DIR/findings.jsonl (one object per partition in the input) and
DIR/groups.jsonl (one per group) and DIR/series.jsonl (lag over the window of every flagged
partition, for the report's charts); with --data-root also appends them as Parquet datasets
`stuck_findings` and `stuck_groups`. The work is the library's (fleetkit.stuck.stages: the facts,
the rules, the roll-up, the time lag, the chart, over Arrow tables); this job moves the rows between
those stages: partitioned by group for `task`, by topic partition for `with_time_lag`. A small input on local paths (up to FLEET_STUCK_INPROCESS_MAX_ROWS rows, 200,000
by default; `--engine`) is judged without starting Spark, by fleetkit.stuck.inprocess: the same
stages, once each.
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
    SNAPSHOT_SCHEMA, arrow_task, iso, mark_done, parse_ts, path_join, read_rows, session, spark_schema, write_dataset,
    write_jsonl,
)

import pyarrow as pa  # noqa: E402
from pyspark.sql import Column, DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from fleetkit.stuck import inprocess, stages  # noqa: E402
from fleetkit.stuck import rules as stuck  # noqa: E402
from fleetkit.stuck.columnar import (  # noqa: E402
    CODE_BITS, FACT_INPUT, GROUP_ID, KEYS, TP_KEYS, group_id_column, packed_columns,
)

def packed_small_values(vocab: Column) -> list[Column]:
    """fleetkit.stuck.columnar.PACKED of each row (its encoder, beside the decoder)."""
    return packed_columns(F, vocab, stuck.REBALANCING)


def group_id() -> Column:
    """fleetkit.stuck.columnar.group_id of each row's cluster, source and group."""
    return group_id_column(F)


def _vocabulary(words: list[str]):
    return F.array(*[F.lit(w) for w in words]) if words else F.array().cast("array<string>")


def judge_groups(snapshots: DataFrame, judgement: stages.Judgement) -> DataFrame:
    """stages.task over the rows partitioned by group (one shuffle): its output, cached (findings,
    groups and points are read from it)."""
    words = judgement.words
    if len(words) >= 1 << CODE_BITS:
        raise SystemExit(f"{len(words)} distinct rejoin causes and assignors: at most {(1 << CODE_BITS) - 1} are read")
    small = [c for c in FACT_INPUT if c != "assigned"]
    rows = (snapshots
            .select(group_id().alias(GROUP_ID), "topic", "partition", *small,
                    *packed_small_values(_vocabulary(words)))
            .repartition(GROUP_ID))
    return rows.mapInArrow(arrow_task(lambda t: stages.task(t.combine_chunks(), judgement)),
                          spark_schema(stages.TASK_SCHEMA)).cache()


TIME_LAG_BUCKETS = 64


def with_time_lag(findings: DataFrame, points: DataFrame, as_of: dt.datetime) -> DataFrame:
    """stages.with_time_lag per bucket of topic partitions: findings and points meet there (cogroup),
    so a partition's history crosses into Python once, not once per group reading it. The points'
    keys are renamed: both sides come from the same rows, which Spark would call ambiguous."""
    def run(fs, pts):
        pts = pts.drop_columns(["_p_b"]).rename_columns([*TP_KEYS, "points"])
        return stages.with_time_lag(fs.drop_columns(["_b"]), pts, as_of)

    bucket = F.pmod(F.xxhash64(*TP_KEYS), F.lit(TIME_LAG_BUCKETS))
    asked = findings.withColumn("_b", bucket)
    pts = points.withColumn("_b", bucket).select(F.col("_b").alias("_p_b"),
                                                 *[F.col(c).alias(f"_p_{c}") for c in TP_KEYS], "points")
    return (asked.groupBy("_b").cogroup(pts.groupBy("_p_b"))
            .applyInArrow(run, spark_schema(stages.FINDING)))


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
    out = judge_groups(snapshots, stages.Judgement(as_of, window, ratio, retention, words))
    findings = out.filter(F.col("_row") == 0).select(*stages.FINDING_INPUT)
    points = out.filter(F.col("_row") == 2).select(*TP_KEYS, "points")
    # cached: written, counted and charted
    findings = with_time_lag(findings, points, as_of).cache()
    groups = out.filter(F.col("_row") == 1).select(*stages.GROUP.names)
    return findings, groups, as_of


def lag_series(findings: DataFrame, snapshots: DataFrame, as_of: dt.datetime, window: dt.timedelta) -> DataFrame:
    """stages.chart of stages.worst_flagged: the flagged findings' keys, status and lag come to the
    driver, then the chosen partitions' rows in the window."""
    spark = findings.sparkSession
    flagged = findings.filter(F.col("status").isin(*stuck.FLAGGED)).select(*KEYS, "status", "lag").toArrow()
    chosen = stages.worst_flagged(flagged)
    if not chosen:
        return spark.createDataFrame([], spark_schema(stages.SERIES))
    lo = as_of - window
    keys = spark.createDataFrame([tuple(c[k] for k in KEYS) for c in chosen],
                                 spark_schema(pa.schema([stages.SERIES.field(k) for k in KEYS])))
    # the chosen groups' names first (a set lookup per snapshot row is cheaper than the join's hash
    # of the key), then the join on the few rows left
    names = sorted({c["group"] for c in chosen})
    rows = (snapshots.filter((F.col("observed_at") >= F.lit(lo)) & (F.col("observed_at") <= F.lit(as_of))
                             & F.col("group").isin(*names))
            .join(F.broadcast(keys), KEYS)  # at most SERIES_LIMIT keys: no shuffle of the snapshots
            .select(*KEYS, "observed_at", "committed_offset", "log_end_offset").toArrow())
    return spark.createDataFrame(stages.chart(chosen, rows, as_of, window))


def for_json(frame: DataFrame) -> DataFrame:
    """Times as ISO-8601 strings ending in Z, as stages.as_json writes them."""
    for f in frame.schema.fields:
        if f.dataType.typeName() == "timestamp":
            frame = frame.withColumn(f.name, iso(F.col(f.name)))
    return frame


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
    spark = session("stuck", args.master)
    snapshots = read_rows(spark, args.snapshots, SNAPSHOT_SCHEMA, ("observed_at", "committed_at"), since)
    findings, groups, as_of = evaluate(snapshots, window, as_of, args.lag_growth_ratio, retention)
    out = args.out
    n_find = write_jsonl(for_json(findings), path_join(out, "findings.jsonl"))
    n_groups = write_jsonl(for_json(groups), path_join(out, "groups.jsonl"))
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
