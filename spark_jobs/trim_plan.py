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
from jobs_common import path_exists, path_join, session, write_text  # noqa: E402
from offsets_health import current_records, latest_inventory, newest_per_key, read_dataset  # noqa: E402

from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from fleetkit.trim import rules  # noqa: E402


def replicas_to_trim(segments: DataFrame, targets: DataFrame) -> dict[tuple, list[dict]]:
    """{(cluster, broker, partition): its segments of the latest inventory, oldest first, each with
    "quarantine" from rules.quarantined}: collected to the driver (a replica has tens of segments)."""
    latest = latest_inventory(segments).join(targets, ["cluster", "broker", "partition"])
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in latest.orderBy("cluster", "partition", "broker", "base_offset").collect():
        out[(r["cluster"], r["broker"], r["partition"])].append(r.asDict())
    for segs in out.values():
        moved = rules.quarantined((seg["base_offset"], seg["is_active"]) for seg in segs)
        for seg in segs:
            seg["quarantine"] = seg["base_offset"] in moved
    return out


def cutoffs_of(replicas: dict[tuple, list[dict]]) -> dict[tuple, int]:
    """{(cluster, partition): the offset below which a trimmed replica keeps no record}: a key is
    lost if any trimmed replica loses it (leadership may move), so the highest cutoff counts."""
    out: dict[tuple, int] = {}
    for (cluster, _broker, partition), segs in replicas.items():
        if any(seg["quarantine"] for seg in segs):
            kept = min(seg["base_offset"] for seg in segs if not seg["quarantine"])
            out[(cluster, partition)] = max(out.get((cluster, partition), kept), kept)
    return out


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
    cutoffs = records.sparkSession.createDataFrame([(c, p, v) for (c, p), v in sorted(cutoffs_of(replicas).items())],
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

    plans: dict[str, dict] = {}
    for r in (seg for key in sorted(replicas, key=lambda k: (k[0], k[2], k[1])) for seg in replicas[key]):
        c = plans.setdefault(r["cluster"], {"cluster": r["cluster"], "partitions": {}})
        p = c["partitions"].setdefault(r["partition"], {"partition": r["partition"], "replicas": {},
                                                        "recommit": [], "active_groups": [],
                                                        "group_metadata_lost": []})
        b = p["replicas"].setdefault(str(r["broker"]), {"broker": r["broker"], "log_dir": r["log_dir"],
                                                        "quarantine": [], "kept": [], "bytes_freed": 0})
        seg = {"base_offset": r["base_offset"], "size_bytes": r["size_bytes"], "is_active": r["is_active"],
               "modified_at": r["modified_at"].isoformat() if r["modified_at"] else None}
        if r["quarantine"]:
            b["quarantine"].append(seg)
            b["bytes_freed"] += r["size_bytes"]
        else:
            b["kept"].append(seg)
    for r in commits.orderBy("cluster", "partition", "group", "topic", "topic_partition").collect():
        p = plans[r["cluster"]]["partitions"].get(r["partition"])
        if p is None:
            continue
        state = rules.group_state(r["group_state"], r["metadata_live"])
        item = {"group": r["group"], "topic": r["topic"], "partition": r["topic_partition"],
                "offset": r["committed_offset"], "metadata": r["metadata"], "record_offset": r["offset"],
                "group_state": state}
        (p["recommit"] if rules.may_recommit(state) else p["active_groups"]).append(item)
    live_groups = (newest.filter(~F.col("tombstone") & (F.col("key_version") != 2))
                   .select("cluster", "partition", "group").distinct())
    for r in live_groups.orderBy("cluster", "partition", "group").collect():
        p = plans.get(r["cluster"], {}).get("partitions", {}).get(r["partition"])
        if p is not None:
            p.setdefault("groups", []).append(r["group"])
    for r in lost.filter(F.col("key_version") == 2).orderBy("cluster", "partition", "group").collect():
        p = plans[r["cluster"]]["partitions"].get(r["partition"])
        if p is not None:
            p["group_metadata_lost"].append({"group": r["group"], "generation": r["generation"],
                                             "record_offset": r["offset"]})
    health_rows = {(r["cluster"], r["broker"], r["partition"]): r.asDict() for r in unhealthy.collect()}
    for c in plans.values():
        for p in c["partitions"].values():
            for b in p["replicas"].values():
                h = health_rows.get((c["cluster"], b["broker"], p["partition"]), {})
                b["verdict"], b["reason"] = h.get("verdict"), h.get("reason")
                b["fix"] = json.loads(h["fix"]) if h.get("fix") else None
        c["partitions"] = [c["partitions"][k] for k in sorted(c["partitions"])]
        for p in c["partitions"]:
            p["replicas"] = [p["replicas"][k] for k in sorted(p["replicas"], key=int)]
    return plans


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
    write_text(path_join(out, "trim_plan.json"),
               json.dumps(list(plans.values()), indent=1, sort_keys=True, default=str))
    return {c: {"partitions": len(p["partitions"]),
                "segments": sum(len(b["quarantine"]) for q in p["partitions"] for b in q["replicas"]),
                "bytes_freed": sum(b["bytes_freed"] for q in p["partitions"] for b in q["replicas"]),
                "recommit": sum(len(q["recommit"]) for q in p["partitions"]),
                "active_groups": sum(len(q["active_groups"]) for q in p["partitions"])}
            for c, p in plans.items()}


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
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
