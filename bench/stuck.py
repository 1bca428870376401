"""Benchmark: the stuck job over 1M, 10M and 30M snapshot rows on local[2].

    .venv/bin/python bench/stuck.py [--partitions 100000] [--snapshots 100] [--sizes 1M,10M,30M]
        [--baseline OTHER_CHECKOUT] [--in-process]

Generates offsets_snapshots as Parquet (100,000 partitions x 100 snapshots = 10M rows; a tenth
and three times that), then times `spark-submit --master local[2] spark_jobs/stuck.py`
end to end (Spark start included), samples the peak RSS of the whole process tree and prints where
the time went (from the job's event log). Targets: 10M rows <= 60 s, and linear: the 10M/1M and
30M/10M time ratios are printed beside the row ratios. With --baseline the same job of an older
checkout runs on the same 10M rows and both findings are compared (statuses, reasons, lags), and
the groups and chart series line for line. With --in-process each size also runs as analyse_stuck
runs a small input (`python spark_jobs/stuck.py --engine in-process`, no JVM), timed the
same way beside the Spark run, and the outputs of the two are compared.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "spark_jobs"), str(REPO / "include"), str(REPO / "bench")]

from measure import format_breakdown, spark_submit_profiled  # noqa: E402


def generate(out: Path, partitions: int, snapshots: int) -> None:
    from pyspark.sql import functions as F

    from jobs_common import session

    spark = session("bench-generate", "local[2]")
    n = partitions * snapshots
    base = 1769904000  # 2026-02-01T00:00:00Z
    df = (spark.range(n)
          .withColumn("pid", (F.col("id") / snapshots).cast("long"))
          .withColumn("i", (F.col("id") % snapshots).cast("long"))
          .withColumn("kind", F.col("pid") % 10)
          .select(
              F.lit("bench").alias("cluster"),
              F.concat(F.lit("group-"), (F.col("pid") / 3).cast("long").cast("string")).alias("group"),
              F.concat(F.lit("topic-"), (F.col("pid") % 1000).cast("string")).alias("topic"),
              (F.col("pid") % 3).cast("int").alias("partition"),
              F.timestamp_seconds(F.lit(base) - (F.lit(snapshots) - F.col("i")) * 9).alias("observed_at"),
              # kinds: 0-5 healthy, 6 stalled, 7 stopped, 8 lagging, 9 rewound
              F.when(F.col("kind") == 6, F.lit(500)).when(F.col("kind") == 7, F.lit(500))
               .when(F.col("kind") == 8, F.col("i") * 50)
               .when((F.col("kind") == 9) & (F.col("i") == snapshots // 2), F.lit(10))
               .otherwise(F.col("i") * 100).cast("long").alias("committed_offset"),
              F.lit(0).cast("long").alias("log_start_offset"),
              (F.col("i") * 100 + 100).cast("long").alias("log_end_offset"),
              F.lit("Stable").alias("group_state"),
              (F.col("kind") != 7).alias("assigned"),
              F.lit(None).cast("string").alias("member_client_id"),
              F.lit(None).cast("string").alias("member_host")))
    df.repartition(8).write.mode("overwrite").parquet(str(out))
    spark.stop()


def timed_job(snapshots: Path, out: Path, driver_memory: str, repo: Path = REPO) -> dict:
    # Spark, whatever the input's size (this checkout's job would judge a small one in process; an older
    # checkout's job has no --engine and always runs Spark)
    engine = ["--engine", "spark"] if Path(repo).resolve() == REPO.resolve() else []
    wall, peak_gb, stdout, b = spark_submit_profiled(
        [str(repo / "spark_jobs" / "stuck.py"), "--snapshots", str(snapshots), "--out", str(out),
         "--window", "15m", *engine], driver_memory=driver_memory, repo=repo)
    print(f"  {format_breakdown(b)}", flush=True)
    return {"wall_s": wall, "peak_gb": peak_gb, "start_s": b.get("spark_start", 0.0), "summary": json.loads(stdout.strip().splitlines()[-1])}


def timed_in_process(snapshots: Path, out: Path) -> dict:
    import os

    from measure import run_measured, spark_env

    env = dict(spark_env(), PYTHONPATH=os.pathsep.join([str(REPO / "include"), str(REPO / "spark_jobs")]))
    wall, peak_gb, stdout = run_measured(
        [sys.executable, str(REPO / "spark_jobs" / "stuck.py"), "--snapshots", str(snapshots),
         "--out", str(out), "--window", "15m", "--engine", "in-process"], env)
    return {"wall_s": wall, "peak_gb": peak_gb, "summary": json.loads(stdout.strip().splitlines()[-1])}


def lines_of(path: Path) -> list[str]:
    """A JSON Lines output's objects with sorted keys, sorted (the job writes lines in no particular
    order, and an older job wrote a group's status counts in any order)."""
    files = [path] if path.is_file() else sorted(path.glob("*.json*"))
    return sorted(json.dumps(json.loads(line), sort_keys=True) for f in files for line in f.read_text().splitlines())


def findings_of(out: Path) -> list[tuple]:
    """The findings' verdict columns, sorted: what must not change between two versions of the job."""
    keys = ("cluster", "source", "group", "topic", "partition", "status", "reason", "confidence", "since",
            "stalled_since", "stopped_since", "lag", "lag_seconds", "lag_seconds_kind", "lag_seconds_error",
            "unchanged_since", "offset_expires_at")
    rows = [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines()]
    return sorted(tuple(str(r.get(k)) for k in keys) for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=100_000, help="partitions of the 10M size")
    ap.add_argument("--snapshots", type=int, default=100)
    ap.add_argument("--sizes", default="1M,10M,30M")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--baseline", type=Path, help="another checkout: its job runs on the 10M rows too and the "
                    "findings are compared")
    ap.add_argument("--in-process", action="store_true", help="also run each size in process (no Spark) and "
                    "compare the outputs")
    args = ap.parse_args()
    scale = {"1M": 0.1, "10M": 1, "30M": 3}
    work = Path(tempfile.mkdtemp(prefix="bench-stuck-"))
    try:
        results = {}
        for label in args.sizes.split(","):
            parts = int(args.partitions * scale[label])
            data = work / f"snapshots-{label}"
            t = time.monotonic()
            generate(data, parts, args.snapshots)
            rows = parts * args.snapshots
            print(f"{label}: generated {rows:,} rows in {time.monotonic() - t:.0f}s", flush=True)
            r = timed_job(data, work / f"out-{label}", args.driver_memory)
            r["rows"] = rows
            results[label] = r
            print(f"{label}: {rows:,} rows, wall {r['wall_s']:.1f}s (Spark start included), "
                  f"{rows / r['wall_s']:,.0f} rows/s, peak RSS {r['peak_gb']:.2f} GB, statuses "
                  f"{r['summary']['statuses']}", flush=True)
            if args.in_process:
                ip = timed_in_process(data, work / f"out-{label}-in-process")
                same = findings_of(work / f"out-{label}") == findings_of(work / f"out-{label}-in-process")
                alike = {name: lines_of(work / f"out-{label}" / name) == lines_of(work / f"out-{label}-in-process" / name)
                         for name in ("groups.jsonl", "series.jsonl")}
                print(f"{label}: in process (no Spark) wall {ip['wall_s']:.1f}s, peak RSS {ip['peak_gb']:.2f} GB "
                      f"beside Spark's {r['wall_s']:.1f}s / {r['peak_gb']:.2f} GB (x{r['wall_s'] / ip['wall_s']:.0f}); "
                      f"findings {'identical' if same else 'DIFFERENT'}; "
                      + ", ".join(f"{n} {'identical' if ok else 'DIFFERENT'}" for n, ok in alike.items()), flush=True)
            if label == "10M" and args.baseline:
                base = timed_job(data, work / "out-baseline", args.driver_memory, args.baseline)
                same = findings_of(work / "out-10M") == findings_of(work / "out-baseline")
                alike = {name: lines_of(work / "out-10M" / name) == lines_of(work / "out-baseline" / name)
                         for name in ("groups.jsonl", "series.jsonl")}
                print(f"baseline {args.baseline}: 10M wall {base['wall_s']:.1f}s, peak {base['peak_gb']:.2f} GB; "
                      f"findings {'identical' if same else 'DIFFERENT'}; "
                      + ", ".join(f"{n} {'identical' if ok else 'DIFFERENT'}" for n, ok in alike.items()), flush=True)
            shutil.rmtree(data, ignore_errors=True)
        verdict = []
        if "10M" in results:
            big = results["10M"]
            verdict.append(f"10M wall {big['wall_s']:.0f}s {'<=' if big['wall_s'] <= 60 else '>'} 60s "
                           f"({'MET' if big['wall_s'] <= 60 else 'MISSED'}), peak {big['peak_gb']:.2f} GB")
        labels = [x for x in ("1M", "10M", "30M") if x in results]
        for lo, hi in zip(labels, labels[1:]):
            a, b = results[lo], results[hi]
            verdict.append(f"{hi}/{lo}: rows x{b['rows'] / a['rows']:.0f}, time x{b['wall_s'] / a['wall_s']:.1f} "
                           f"(without Spark start x{(b['wall_s'] - b['start_s']) / (a['wall_s'] - a['start_s']):.1f})")
        print("RESULT " + "; ".join(verdict))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
