"""Benchmark: trim_health + trim_plan for one 10M-record __consumer_offsets partition on local[2].

    .venv/bin/python bench/trim_plan.py [--records 10000000] [--keys 100000] [--baseline CHECKOUT]
        [--in-process]

Generates the datasets a bloated partition yields (10M offset-commit records over 100,000 keys,
~80 segments on one broker, cleaner checkpoint 0), then times `spark-submit --master local[2]`
of spark_jobs/trim_health.py and spark_jobs/trim_plan.py end to end (Spark start included),
sampling the peak RSS of the process tree, and prints where each job's time went (from its event
log: Spark start, read, shuffle, Python UDF, aggregation, sort). Targets: trim_health <= 60 s,
trim_plan <= 30 s, peak RSS <= 3 GB each. With --baseline OTHER_CHECKOUT the same jobs of an older
commit run on the same data, and health.jsonl / trim_plan.json are compared byte for byte.
With --in-process the same data root is also judged by the in-process engine the DAGs use for a
small data root (`python spark_jobs/trim_health.py --engine in-process --trim-plan`, no JVM),
timed beside the Spark jobs, and its health.jsonl, segments.jsonl and trim_plan.json are compared
with Spark's row for row.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "spark_jobs"), str(REPO / "include"), str(REPO / "bench")]

from measure import format_breakdown, spark_submit_profiled  # noqa: E402


def generate(root: Path, records: int, keys: int, per_segment: int) -> None:
    from pyspark.sql import functions as F

    from fleetkit.core.datasets import DataRoot, write_collection
    from jobs_common import session

    spark = session("bench-generate", "local[2]")
    now = dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)
    out = root / "offsets_topic_records" / "cluster=bench" / "date=2026-02-01"
    (spark.range(records)
     .select(F.lit("bench").alias("cluster"), F.lit(7).cast("int").alias("partition"), F.col("id").alias("offset"),
             F.lit(now).alias("observed_at"), F.lit(1).cast("smallint").alias("key_version"),
             F.concat(F.lit("group-"), (F.col("id") % (keys // 10)).cast("string")).alias("group"),
             F.lit("orders").alias("topic"), (F.col("id") % 10).cast("int").alias("topic_partition"),
             F.lit(1).cast("smallint").alias("value_version"), F.col("id").alias("committed_offset"),
             F.lit(None).cast("int").alias("leader_epoch"), F.lit("").alias("metadata"),
             F.lit(0).cast("long").alias("commit_timestamp"), F.lit(0).cast("long").alias("expire_timestamp"),
             F.lit(False).alias("tombstone"), F.lit(68).cast("int").alias("size_bytes"),
             F.lit(None).cast("int").alias("generation"), F.lit(None).cast("string").alias("protocol_type"),
             F.lit(None).cast("string").alias("protocol"), F.lit(None).cast("string").alias("leader"),
             F.lit(None).cast("array<struct<client_id:string,client_host:string,member_id:string>>").alias("members"))
     .repartition(8).write.parquet(str(out)))
    spark.stop()
    segs = [{"cluster": "bench", "broker": 0, "log_dir": "/data", "topic": "__consumer_offsets", "partition": 7,
             "observed_at": now, "base_offset": b, "size_bytes": min(per_segment, records - b) * 68,
             "modified_at": now, "is_active": b + per_segment >= records}
            for b in range(0, records, per_segment)]
    cps = [{"cluster": "bench", "broker": 0, "log_dir": "/data", "topic": "__consumer_offsets", "partition": 7,
            "observed_at": now, "checkpoint_offset": 0}]
    write_collection(DataRoot(root), "bench", now, {"segment_inventory": segs, "cleaner_checkpoints": cps})


def timed(argv: list[str], driver_memory: str, repo: Path = REPO) -> tuple[float, float, str]:
    wall, peak_gb, out, b = spark_submit_profiled([str(repo / "spark_jobs" / argv[0]), *argv[1:]],
                                                  driver_memory=driver_memory, repo=repo)
    print(f"  {Path(argv[0]).stem}: {format_breakdown(b)}", flush=True)
    return wall, peak_gb, out.strip().splitlines()[-1]


def rows_of(path: Path) -> list[str]:
    """A JSON Lines file's objects with sorted keys, sorted (Spark writes the rows in no fixed order)."""
    return sorted(json.dumps(json.loads(line), sort_keys=True) for line in path.read_text().splitlines() if line)


def timed_in_process(data: Path, fleet: Path, out: Path) -> tuple[float, float, str]:
    import os

    from measure import run_measured, spark_env

    env = dict(spark_env(), PYTHONPATH=os.pathsep.join([str(REPO / "include"), str(REPO / "spark_jobs")]))
    wall, peak_gb, stdout = run_measured(
        [sys.executable, str(REPO / "spark_jobs" / "trim_health.py"), "--data-root", str(data), "--fleet",
         str(fleet), "--out", str(out), "--trim-plan", "--engine", "in-process"], env)
    return wall, peak_gb, stdout.strip().splitlines()[-1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--driver-memory", default="2g", help="spark-submit --driver-memory (local mode: all of Spark)")
    ap.add_argument("--baseline", type=Path, help="another checkout of this repository (an older commit): its "
                    "jobs run on the same data and the outputs are compared byte for byte")
    ap.add_argument("--in-process", action="store_true", help="also judge the data root in process (no Spark) "
                    "and compare the files with Spark's")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-trim-"))
    try:
        t = time.monotonic()
        generate(work / "data", args.records, args.keys, 123_000)
        print(f"generated {args.records:,} records in {time.monotonic() - t:.0f}s", flush=True)
        fleet = work / "fleet.yaml"
        fleet.write_text(yaml.safe_dump({"version": 1, "clusters": [{
            "name": "bench", "kafka_version": "0.9.0.1", "kafka_conn_id": "bench",
            "cleaner": {"dedupe_buffer_size": 2 * 1024 * 1024, "threads": 1}}]}))
        h_s, h_gb, h_out = timed(["trim_health.py", "--data-root", str(work / "data"), "--fleet", str(fleet),
                                  "--out", str(work / "out"), "--engine", "spark"], args.driver_memory)
        print(f"trim_health: {h_s:.1f}s, peak {h_gb:.2f} GB, {h_out}", flush=True)
        p_s, p_gb, p_out = timed(["trim_plan.py", "--data-root", str(work / "data"), "--health", str(work / "out"),
                                  "--out", str(work / "out")], args.driver_memory)
        print(f"trim_plan: {p_s:.1f}s, peak {p_gb:.2f} GB, {p_out}", flush=True)
        if args.in_process:
            i_s, i_gb, i_out = timed_in_process(work / "data", fleet, work / "in-process")
            same = {name: rows_of(work / "out" / name) == rows_of(work / "in-process" / name)
                    for name in ("health.jsonl", "segments.jsonl")}
            same["trim_plan.json"] = (json.loads((work / "out" / "trim_plan.json").read_text())
                                      == json.loads((work / "in-process" / "trim_plan.json").read_text()))
            print(f"in process (health and plan, no Spark): {i_s:.1f}s, peak {i_gb:.2f} GB, {i_out}; Spark: health "
                  f"{h_s:.1f}s + plan {p_s:.1f}s = {h_s + p_s:.1f}s, peak {max(h_gb, p_gb):.2f} GB; the same files: "
                  + ", ".join(f"{n} {'yes' if v else 'NO'}" for n, v in same.items()), flush=True)
        if args.baseline:
            b_h, b_hgb, _ = timed(["trim_health.py", "--data-root", str(work / "data"), "--fleet", str(fleet),
                                   "--out", str(work / "base")], args.driver_memory, args.baseline)
            b_p, b_pgb, _ = timed(["trim_plan.py", "--data-root", str(work / "data"), "--health", str(work / "base"),
                                   "--out", str(work / "base")], args.driver_memory, args.baseline)
            print(f"baseline {args.baseline}: trim_health {b_h:.1f}s peak {b_hgb:.2f} GB, trim_plan {b_p:.1f}s "
                  f"peak {b_pgb:.2f} GB", flush=True)
            for name in ("trim_plan.json", "health.jsonl"):
                mine, theirs = (work / "out" / name).read_bytes(), (work / "base" / name).read_bytes()
                print(f"{name}: {'byte-identical' if mine == theirs else 'DIFFERENT'} to the baseline's", flush=True)
        plan = json.loads((work / "out" / "trim_plan.json").read_text())
        segs = sum(len(r["quarantine"]) for c in plan for p in c["partitions"] for r in p["replicas"])
        print(f"RESULT {args.records:,} records: health {h_s:.0f}s + plan {p_s:.0f}s "
              f"({args.records / p_s:,.0f} records/s in the plan), {segs} segments to quarantine, "
              f"peak {max(h_gb, p_gb):.2f} GB; targets: health <= 60s {'MET' if h_s <= 60 else 'MISSED'}, "
              f"plan <= 30s {'MET' if p_s <= 30 else 'MISSED'}, peak <= 3 GB "
              f"{'MET' if max(h_gb, p_gb) <= 3 else 'MISSED'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
