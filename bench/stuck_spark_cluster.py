"""Benchmark: the stuck_partitions job on Spark standalone (a master and two workers, 1 core each)
against local[2], same data, same machine.

    .venv/bin/python bench/stuck_spark_cluster.py [--partitions 100000] [--snapshots 100]
                                                  [--worker-memory 2g] [--skip-small]

Generates offsets_snapshots as Parquet (100,000 partitions x 100 snapshots = 10M rows, and a
tenth of it: 1M) the way bench/stuck_partitions.py does, starts a standalone cluster of its own
(fleetlab.spark_cluster on the tests' port plan, FLEET_TEST_PORT_OFFSET applies, or --plan demo; executors on the
second virtualenv, so the job's code comes only from --py-files), and times
`spark-submit stuck_partitions.py` end to end (Spark start included) on local[2] and on the
cluster, with the same --py-files and driver memory. Two cores in both: local[2] runs two task
threads in the driver JVM; the cluster runs two executors (one per worker, 1 core each, the
worker's memory each) beside a driver, all on this machine, so the figure measures the cost of the
cluster machinery (executor start-up, Python workers in a second venv, shuffles over the network
stack), not a speed-up. Prints both wall times and the ratio per size.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "spark_jobs"), str(REPO / "include"), str(REPO / "bench"), str(REPO / "plugins")]

from measure import run_measured, spark_env  # noqa: E402

# bench/stuck_partitions.py's data generator (spark_jobs/ has a module of the same name)
_spec = importlib.util.spec_from_file_location("bench_stuck_partitions", REPO / "bench" / "stuck_partitions.py")
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)
generate = _bench.generate

from fleetlab import ports, spark_cluster  # noqa: E402


def timed(master: str, snapshots: Path, out: Path, py_files: Path, env: dict) -> dict:
    wall, peak_gb, stdout = run_measured(
        ["spark-submit", "--master", master, "--driver-memory", "4g", "--conf", "spark.ui.enabled=false",
         "--py-files", str(py_files), str(REPO / "spark_jobs" / "stuck_partitions.py"),
         "--snapshots", str(snapshots), "--out", str(out), "--window", "15m"], env=env)
    return {"wall_s": wall, "peak_gb": peak_gb, "summary": json.loads(stdout.strip().splitlines()[-1])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--snapshots", type=int, default=100)
    ap.add_argument("--worker-memory", default="2g", help="each of the 2 workers (and its executor)")
    ap.add_argument("--skip-small", action="store_true", help="only the 10M rows")
    ap.add_argument("--plan", choices=["tests", "demo"], default="tests",
                    help="the port plan of the benchmark's cluster (demo: beside a test run of the same checkout)")
    args = ap.parse_args()

    from fleet_airflow.operators.spark import build_py_files

    work = Path(tempfile.mkdtemp(prefix="bench-stuck-cluster-"))
    plan = ports.DEMO if args.plan == "demo" else ports.tests()
    spec = spark_cluster.SparkClusterSpec.from_plan(work / "spark", plan, workers=2,
                                                    worker_memory=args.worker_memory)
    try:
        py_files = build_py_files(work / "py-files")
        t = time.monotonic()
        spark_cluster.up(spec)
        print(f"standalone cluster up in {time.monotonic() - t:.0f}s: {spec.master_url}, 2 workers x 1 core x "
              f"{args.worker_memory}; executors on {spec.exec_python}", flush=True)
        local_env = spark_env()
        cluster_env = {**spark_env(), **spark_cluster.submit_env(spec)}
        sizes = [("1M", args.partitions // 10), ("10M", args.partitions)]
        if args.skip_small:
            sizes = sizes[1:]
        lines = []
        for label, parts in sizes:
            data = work / f"snapshots-{label}"
            t = time.monotonic()
            generate(data, parts, args.snapshots)
            rows = parts * args.snapshots
            print(f"{label}: generated {rows:,} rows in {time.monotonic() - t:.0f}s", flush=True)
            local = timed("local[2]", data, work / f"out-local-{label}", py_files, local_env)
            print(f"{label} local[2]:   wall {local['wall_s']:.1f}s, peak RSS {local['peak_gb']:.2f} GB "
                  f"(driver tree), statuses {local['summary']['statuses']}", flush=True)
            cluster = timed(spec.master_url, data, work / f"out-cluster-{label}", py_files, cluster_env)
            print(f"{label} standalone: wall {cluster['wall_s']:.1f}s, peak RSS {cluster['peak_gb']:.2f} GB "
                  f"(driver tree; executors not counted), statuses {cluster['summary']['statuses']}", flush=True)
            if cluster["summary"]["statuses"] != local["summary"]["statuses"]:
                raise SystemExit(f"{label}: the cluster's verdicts differ from local[2]'s")
            apps = [a for a in spark_cluster.applications(spec) if a["name"] == "stuck_partitions"]
            ratio = cluster["wall_s"] / local["wall_s"]
            lines.append(f"{label} ({rows:,} rows): local[2] {local['wall_s']:.1f}s, standalone "
                         f"{cluster['wall_s']:.1f}s, standalone/local = {ratio:.2f}x")
            print(f"{label}: standalone/local[2] wall ratio {ratio:.2f}x (master saw {len(apps)} stuck_partitions "
                  f"application(s) so far)", flush=True)
        print("RESULT " + "; ".join(lines))
    finally:
        for line in spark_cluster.down(spec):
            print(line)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
