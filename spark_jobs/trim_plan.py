"""Lossless segment-trimming plans for unhealthy __consumer_offsets partitions.

    PATH=.venv/bin:$PATH spark-submit spark_jobs/trim_plan.py --data-root ROOT --fleet FILE --health DIR
        --out DIR [--partitions 3,7 | all-unhealthy]

For each unhealthy partition replica (from offsets_health's health.jsonl): the segments to
quarantine (fleetkit.trim.rules: every rolled segment but the newest one; never the active one), the bytes freed, and
the live keys whose newest record sits only in those segments -- the offsets that would vanish.
Those are re-committed after the trim (for groups that are Empty); active groups are listed for
the operator; group-metadata keys in removed segments are listed (those groups will rebalance).
Writes DIR/trim_plan.json (one plan per cluster, the data the runbook executes).
The DAGs run it inside the offsets_health application (`offsets_health.py --trim-plan`: one Spark
start for both); on its own it reads the health.jsonl an earlier offsets_health wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs_common import mark_done, path_exists, path_join, session, write_text  # noqa: E402
from offsets_health import current_records, latest_inventory, newest_per_key, read_dataset  # noqa: E402

from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from fleetkit.trim import planning  # noqa: E402


def replicas_to_trim(segments: DataFrame, targets: DataFrame) -> dict[tuple, list[dict]]:
    """{(cluster, broker, partition): its segments of the latest inventory, oldest first, each with
    "quarantine" (planning.mark_quarantine)}: collected to the driver (a replica has tens of segments)."""
    latest = latest_inventory(segments).join(targets, ["cluster", "broker", "partition"])
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in latest.orderBy("cluster", "partition", "broker", "base_offset").collect():
        out[(r["cluster"], r["broker"], r["partition"])].append(r.asDict())
    return planning.mark_quarantine(out)


def lost_keys(newest: DataFrame, cutoffs: DataFrame) -> DataFrame:
    """Live keys (newest record per key, not a tombstone) below the partition's cutoff: removed by the trim."""
    return (newest.filter(~F.col("tombstone")).join(cutoffs, ["cluster", "partition"])
            .filter(F.col("offset") < F.col("cutoff")))


def build(records: DataFrame, segments: DataFrame, health: DataFrame, group_states: DataFrame | None,
          partitions: list[int] | None) -> dict:
    unhealthy = health.filter(F.col("verdict") != "HEALTHY")
    if partitions is not None:
        unhealthy = health.filter(F.col("partition").isin(partitions))
    targets = unhealthy.select("cluster", "broker", "partition").distinct()
    replicas = replicas_to_trim(segments, targets)
    cutoffs = records.sparkSession.createDataFrame([(c, p, v) for (c, p), v in sorted(planning.cutoffs_of(replicas).items())],
                                                   "cluster string, partition long, cutoff long")
    # one aggregation of the records serves every question below (lost keys, live groups, group state)
    relevant = records.join(F.broadcast(cutoffs.select("cluster", "partition")), ["cluster", "partition"])
    newest = newest_per_key(relevant.withColumn("has_members", F.coalesce(F.size("members") > 0, F.lit(False))),
                            ["tombstone", "key_version", "committed_offset", "generation", "has_members"]).cache()
    lost = lost_keys(newest, cutoffs).cache()
    # the commit metadata (a string, kept out of the aggregation) of the lost commits only
    at = ["cluster", "partition", "offset"]
    metadata = (relevant.select(*at, "metadata").join(lost.select(*at), at, "left_semi")
                .groupBy(*at).agg(F.first("metadata").alias("metadata")))
    commits = lost.filter(F.col("key_version") != 2).join(metadata, at, "left")
    # is the group active? (rules.group_state, from the collected coordinator state and the group's
    # newest group-metadata record). The executor re-checks live before it commits.
    gm = (newest.filter(F.col("key_version") == 2)
          .select("cluster", "group", (~F.col("tombstone") & F.col("has_members")).alias("metadata_live")))
    commits = commits.join(gm, ["cluster", "group"], "left")
    if group_states is not None:
        commits = commits.join(group_states, ["cluster", "group"], "left")
    else:
        commits = commits.withColumn("group_state", F.lit(None).cast("string"))

    commits = commits.orderBy("cluster", "partition", "group", "topic", "topic_partition")
    live_groups = (newest.filter(~F.col("tombstone") & (F.col("key_version") != 2))
                   .select("cluster", "partition", "group").distinct().orderBy("cluster", "partition", "group"))
    metadata_lost = lost.filter(F.col("key_version") == 2).orderBy("cluster", "partition", "group")
    health_rows = {(r["cluster"], r["broker"], r["partition"]): r.asDict() for r in unhealthy.collect()}
    return planning.assemble(replicas, [r.asDict() for r in commits.select(*planning.COMMIT_FIELDS).collect()],
                             [r.asDict() for r in live_groups.collect()],
                             [r.asDict() for r in metadata_lost.collect()], health_rows)


def group_states_frame(spark, root: str) -> DataFrame | None:
    try:
        gc = read_dataset(spark, root, "group_coordinators")
    except SystemExit:
        return None
    return gc.groupBy("cluster", "group").agg(F.max_by("state", "observed_at").alias("group_state"))


def parse_partitions(text: str) -> list[int] | None:
    """--partitions: 'all-unhealthy' (None) or partition numbers like 3,7."""
    if text == "all-unhealthy":
        return None
    try:
        return sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise SystemExit(f"--partitions {text!r} must be 'all-unhealthy' or numbers like 3,7") from None


def run(spark, data_root: str, health_dir: str, out: str, parts: list[int] | None) -> dict:
    """DIR/trim_plan.json from health_dir's health.jsonl; returns the summary per cluster."""
    health_file = path_join(health_dir, "health.jsonl")
    if not path_exists(health_file):
        raise SystemExit(f"{health_file} does not exist (run offsets_health first)")
    health = spark.read.json(health_file)
    plans = build(current_records(spark, data_root),
                  read_dataset(spark, data_root, "segment_inventory"), health,
                  group_states_frame(spark, data_root), parts)
    write_text(path_join(out, "trim_plan.json"), planning.plan_json(plans))
    return planning.summary(plans)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", required=True)
    ap.add_argument("--health", required=True, help="the folder holding offsets_health's health.jsonl")
    ap.add_argument("--out", required=True)
    ap.add_argument("--partitions", default="all-unhealthy", help="'all-unhealthy' or partition numbers like 3,7")
    ap.add_argument("--master")
    args = ap.parse_args(argv)
    parts = parse_partitions(args.partitions)
    t0 = time.monotonic()
    spark = session("trim_plan", args.master)
    summary = run(spark, args.data_root, args.health, args.out, parts)
    print(json.dumps({"plans": summary, "seconds": round(time.monotonic() - t0, 1)}), flush=True)
    mark_done(args.out, spark)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
