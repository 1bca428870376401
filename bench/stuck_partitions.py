"""Benchmark: the stuck_partitions job over 1M and 10M snapshot rows on local[2].

    .venv/bin/python bench/stuck_partitions.py [--partitions 100000] [--snapshots 100] [--skip-small]

Generates offsets_snapshots as Parquet (100,000 partitions x 100 snapshots = 10M rows, and a
tenth of it), then times `spark-submit --master local[2] spark_jobs/stuck_partitions.py` end to
end (Spark start included) and samples the peak RSS of the whole process tree. Targets:
10M rows <= 3 min wall, peak memory < 6 GB, 1M -> 10M costs at most 10x the time.
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

from measure import run_measured  # noqa: E402


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


def timed_job(snapshots: Path, out: Path) -> dict:
    wall, peak_gb, stdout = run_measured(
        ["spark-submit", "--master", "local[2]", "--driver-memory", "4g", "--conf", "spark.ui.enabled=false",
         str(REPO / "spark_jobs" / "stuck_partitions.py"), "--snapshots", str(snapshots), "--out", str(out),
         "--window", "15m"])
    return {"wall_s": wall, "peak_gb": peak_gb, "summary": json.loads(stdout.strip().splitlines()[-1])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--snapshots", type=int, default=100)
    ap.add_argument("--skip-small", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-stuck-"))
    try:
        results = {}
        sizes = [("1M", args.partitions // 10), ("10M", args.partitions)]
        if args.skip_small:
            sizes = sizes[1:]
        for label, parts in sizes:
            data = work / f"snapshots-{label}"
            t = time.monotonic()
            generate(data, parts, args.snapshots)
            rows = parts * args.snapshots
            print(f"{label}: generated {rows:,} rows in {time.monotonic() - t:.0f}s", flush=True)
            r = timed_job(data, work / f"out-{label}")
            results[label] = r
            print(f"{label}: {rows:,} rows, wall {r['wall_s']:.1f}s (Spark start included), "
                  f"{rows / r['wall_s']:,.0f} rows/s, peak RSS {r['peak_gb']:.2f} GB, statuses "
                  f"{r['summary']['statuses']}", flush=True)
        big = results["10M"]
        verdict = [f"10M wall {big['wall_s']:.0f}s {'<=' if big['wall_s'] <= 180 else '>'} 180s",
                   f"peak {big['peak_gb']:.2f} GB {'<' if big['peak_gb'] < 6 else '>='} 6 GB"]
        if "1M" in results:
            ratio = big["wall_s"] / results["1M"]["wall_s"]
            verdict.append(f"10M/1M time ratio {ratio:.1f}x {'<=' if ratio <= 10 else '>'} 10x")
        print("RESULT " + "; ".join(verdict))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
