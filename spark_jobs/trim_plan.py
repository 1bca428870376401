"""Lossless segment-trimming plans for unhealthy __consumer_offsets partitions.

    PATH=.venv/bin:$PATH spark-submit spark_jobs/trim_plan.py --data-root ROOT --fleet FILE --health DIR
        --out DIR [--partitions 3,7 | all-unhealthy]

For each unhealthy partition replica (from trim_health's health.jsonl): the segments to
quarantine (fleetkit.trim.rules: every rolled segment but the newest one; never the active one), the bytes freed, and
the live keys whose newest record sits only in those segments -- the offsets that would vanish.
Those are re-committed after the trim (for groups that are Empty); active groups are listed for
the operator; group-metadata keys in removed segments are listed (those groups will rebalance).
Writes DIR/trim_plan.json (one plan per cluster, the data the runbook executes).
The DAGs run it inside the trim_health application (`trim_health.py --trim-plan`: one Spark
start for both); on its own it reads the health.jsonl an earlier trim_health wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs_common import arrow_task, mark_done, path_exists, path_join, session, spark_schema, write_text  # noqa: E402
from trim_health import (  # noqa: E402
    current_records, latest_inventory, newest_per_key, read_dataset, with_has_members,
)

from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from fleetkit.trim import planning, stages  # noqa: E402


def build(records: DataFrame, segments: DataFrame, health_rows: list[dict], states: dict | None,
          partitions: list[int] | None) -> dict:
    """{cluster: plan}: the replicas to trim from the latest inventory, then stages.plan_rows of each
    key of their partitions (in the tasks), collected for stages.plans."""
    replicas, health_map = stages.replicas_to_trim(latest_inventory(segments), health_rows, partitions)
    cutoffs = planning.cutoffs_of(replicas)
    wanted = records.sparkSession.createDataFrame(sorted(cutoffs), "cluster string, partition int")
    relevant = with_has_members(records.join(F.broadcast(wanted), ["cluster", "partition"]))
    rows = newest_per_key(relevant, stages.PLAN_COLS, lambda t: stages.plan_rows(t, cutoffs), stages.PLAN_ROWS)
    return stages.plans(replicas, health_map, rows.toArrow(), states)


def group_states(spark, root: str) -> dict | None:
    """stages.group_states per group (its rows in one task), collected; None without the dataset."""
    try:
        gc = read_dataset(spark, root, "group_coordinators").select("cluster", "group", "observed_at", "state")
    except SystemExit:
        return None
    out = gc.repartition("cluster", "group").mapInArrow(
        arrow_task(lambda t: stages.states_table(stages.group_states(t, with_time=True))), spark_schema(stages.STATES))
    return stages.group_states(out.toArrow())


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
        raise SystemExit(f"{health_file} does not exist (run trim_health first)")
    health = [r.asDict() for r in spark.read.json(health_file).collect()]
    plans = build(current_records(spark, data_root),
                  read_dataset(spark, data_root, "segment_inventory"), health,
                  group_states(spark, data_root), parts)
    write_text(path_join(out, "trim_plan.json"), planning.plan_json(plans))
    return planning.summary(plans)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", required=True)
    ap.add_argument("--health", required=True, help="the folder holding trim_health's health.jsonl")
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
