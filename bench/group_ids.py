"""Benchmark: group-id reconciliation.

    .venv/bin/python bench/group_ids.py [--rows 1000000] [--creates 10000] [--read 100000]
        [--skip-diff] [--skip-zk]

(a) diff: generates 1M group_id_mappings rows and 1M group_members rows as Parquet (85% OK, 5%
    MISMATCHED, 9% MISSING, 9.5% STALE, 0.5% CONFLICT), then times
    `spark-submit --master local[2] spark_jobs/group_ids.py` end to end (Spark start
    included) and samples the peak RSS of its process tree. Target: <= 60 s.
(b) apply: 10,000 conditional creates (journaled, fleetkit.group_ids.execute.apply) to the lab ZooKeeper, under the
    /kafka chroot. Target: >= 1,000 operations/s.
(c) collect: reads `--read` mapping znodes (data, version, ctime, mtime) with read_mappings.

The lab is the test lab (.lab-test, ports shifted by FLEET_TEST_PORT_OFFSET): reused when it runs,
otherwise started and stopped again (by PID) at the end. Everything it writes lives under a
unique root, deleted at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "spark_jobs"), str(REPO / "include"), str(REPO / "bench")]

from measure import run_measured  # noqa: E402


def generate(out: Path, n: int) -> dict:
    from pyspark.sql import functions as F

    from jobs_common import session

    spark = session("bench-generate", "local[2]")
    base = dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)
    ok, mism, missing, conflict = int(n * 0.85), int(n * 0.05), int(n * 0.09), int(n * 0.005)
    stale = n - ok - mism - conflict  # znodes without member
    name = F.concat(F.lit("10."), (F.col("id") % 250).cast("string"), F.lit("."), ((F.col("id") / 250) % 250).cast("long").cast("string"),
                    F.lit(".1-consumer-"), F.col("id").cast("string"))
    group = F.concat(F.lit("group-"), (F.col("id") % 20000).cast("string"))
    ts = F.lit(base)
    # members: ids [0, ok+mism+missing) once, conflict ids twice (two groups)
    m1 = spark.range(0, ok + mism + missing + conflict).select(
        F.lit("bench").alias("cluster"), ts.alias("observed_at"), group.alias("group"),
        F.concat(F.lit("consumer-"), F.col("id").cast("string")).alias("client_id"),
        F.regexp_extract(name, r"^([^-]*)-", 1).alias("client_host"),
        F.concat(F.lit("consumer-"), F.col("id").cast("string"), F.lit("-uuid")).alias("member_id"))
    c_lo = ok + mism + missing
    m2 = spark.range(c_lo, c_lo + conflict).select(
        F.lit("bench").alias("cluster"), ts.alias("observed_at"), F.lit("other-group").alias("group"),
        F.concat(F.lit("consumer-"), F.col("id").cast("string")).alias("client_id"),
        F.regexp_extract(name, r"^([^-]*)-", 1).alias("client_host"),
        F.concat(F.lit("consumer-"), F.col("id").cast("string"), F.lit("-uuid2")).alias("member_id"))
    members = m1.unionByName(m2)
    # mappings: OK, MISMATCHED, CONFLICT ids, then znodes of ids nobody has (STALE, 2 h old)
    z_ids = (spark.range(0, ok + mism).unionByName(spark.range(c_lo, c_lo + conflict))
             .unionByName(spark.range(10 * n, 10 * n + stale)))
    mappings = z_ids.select(
        F.lit("bench").alias("cluster"), ts.alias("observed_at"),
        F.concat(F.lit("/client_group_id/"), name).alias("path"),
        F.regexp_extract(name, r"^([^-]*)-", 1).alias("client_host"),
        F.concat(F.lit("consumer-"), F.col("id").cast("string")).alias("client_id"),
        F.when((F.col("id") >= ok) & (F.col("id") < ok + mism), F.lit("wrong-group")).otherwise(group).alias("group"),
        F.lit(3).alias("znode_version"), F.lit(base - dt.timedelta(days=1)).alias("ctime"),
        F.when(F.col("id") >= 10 * n, F.lit(base - dt.timedelta(hours=2)))
         .otherwise(F.lit(base - dt.timedelta(minutes=1))).alias("mtime"))
    mappings.repartition(8).write.mode("overwrite").parquet(str(out / "mappings"))
    members.repartition(8).write.mode("overwrite").parquet(str(out / "members"))
    counts = {"mappings": spark.read.parquet(str(out / "mappings")).count(),
              "members": spark.read.parquet(str(out / "members")).count()}
    spark.stop()
    return {**counts, "expected": {"OK": ok, "MISMATCHED": mism, "MISSING": missing, "STALE": stale,
                                   "CONFLICT": conflict}}


def bench_diff(n: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-gid-"))
    try:
        t = time.monotonic()
        gen = generate(work, n)
        print(f"(a) generated {gen['mappings']:,} mappings and {gen['members']:,} members in "
              f"{time.monotonic() - t:.0f}s", flush=True)
        wall, peak, out = run_measured(
            ["spark-submit", "--master", "local[2]", "--driver-memory", "4g", "--conf", "spark.ui.enabled=false",
             str(REPO / "spark_jobs" / "group_ids.py"), "--mappings", str(work / "mappings"),
             "--members", str(work / "members"), "--out", str(work / "out")])
        summary = json.loads(out.strip().splitlines()[-1])
        counts = summary["clusters"]["bench"]
        assert counts == gen["expected"], (counts, gen["expected"])
        print(f"(a) diff {gen['mappings']:,} mappings x {gen['members']:,} members: spark-submit --master local[2] "
              f"wall {wall:.1f}s (Spark start included; job {summary['seconds']}s in-session), "
              f"peak RSS {peak:.2f} GB, classes {counts}, findings written {summary['findings']:,}", flush=True)
        print(f"RESULT diff wall {wall:.1f}s {'<=' if wall <= 60 else '>'} 60s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _delete_all(zk, root: str, window: int = 2000) -> None:
    from kazoo.exceptions import NoNodeError

    if not zk.exists(root):
        return
    children = zk.get_children(root)
    for i in range(0, len(children), window):
        futs = [zk.delete_async(f"{root}/{c}") for c in children[i:i + window]]
        for f in futs:
            try:
                f.get(timeout=30)
            except NoNodeError:
                pass
    zk.delete(root)


def bench_zk(creates: int, read: int) -> None:
    from kazoo.client import KazooClient

    from fleetkit.group_ids import collect as gi_collect
    from fleetkit.group_ids import execute as gi_execute
    from fleetlab import ports
    from fleetlab.lab import Lab, fleet_specs

    spec = fleet_specs(REPO / ".lab-test", ports.tests(), suffix="test")["labtest"]
    lab = Lab(spec)
    started = not lab.running()
    if started:
        print(f"starting the test lab (ZooKeeper 127.0.0.1:{spec.zk_port})", flush=True)
        lab.up()
    zk = KazooClient(hosts=f"{spec.zk_hosts}{spec.chroot}", timeout=15)
    zk.start(timeout=15)
    root = f"/bench_client_group_id_{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="bench-gid-zk-"))
    try:
        ops = [{"op": "create", "class": "MISSING", "path": f"{root}/10.9.{i // 250 % 250}.{i % 250}-consumer-{i}",
                "before": None, "after": f"group-{i % 100}", "version": None} for i in range(creates)]
        zk.ensure_path(root)
        res = gi_execute.apply(zk, ops, root, work / "journal.jsonl")
        assert len(res.changed) == creates, res.summary()
        rate = creates / res.seconds
        print(f"(b) apply: {creates:,} conditional creates (journaled, fsync per window of 256) to the lab ZooKeeper "
              f"in {res.seconds:.2f}s = {rate:,.0f} ops/s", flush=True)
        print(f"RESULT apply {rate:,.0f} ops/s {'>=' if rate >= 1000 else '<'} 1,000 ops/s", flush=True)
        if read > creates:
            more = [{"op": "create", "class": "MISSING", "path": f"{root}/10.8.{i // 250 % 250}.{i % 250}-consumer-{i}",
                     "before": None, "after": f"group-{i % 100}", "version": None} for i in range(read - creates)]
            gi_execute.apply(zk, more, root)
        t = time.monotonic()
        rows, problems = gi_collect.read_mappings(zk, root, "bench", dt.datetime.now(dt.timezone.utc))
        secs = time.monotonic() - t
        assert len(rows) == max(read, creates) and not problems
        print(f"(c) collect: read {len(rows):,} mapping znodes (data, version, ctime, mtime) in {secs:.2f}s = "
              f"{len(rows) / secs:,.0f} znodes/s", flush=True)
    finally:
        _delete_all(zk, root)
        zk.stop()
        zk.close()
        shutil.rmtree(work, ignore_errors=True)
        if started:
            for line in lab.down():
                print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--creates", type=int, default=10_000)
    ap.add_argument("--read", type=int, default=100_000)
    ap.add_argument("--skip-diff", action="store_true")
    ap.add_argument("--skip-zk", action="store_true")
    args = ap.parse_args()
    if not args.skip_diff:
        bench_diff(args.rows)
    if not args.skip_zk:
        bench_zk(args.creates, args.read)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
