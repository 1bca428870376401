"""Benchmark: the stuck job on Spark standalone (a master and two workers, 1 core each)
against local[2], same data, same machine.

    .venv/bin/python bench/stuck_spark_cluster.py [--partitions 100000] [--snapshots 100]
                                                  [--worker-memory 2g] [--skip-small] [--hosts]

Generates offsets_snapshots as Parquet (100,000 partitions x 100 snapshots = 10M rows, and a
tenth of it: 1M) the way bench/stuck.py does, starts a standalone cluster of its own
(fleetlab.spark_cluster on the tests' port plan, FLEET_TEST_PORT_OFFSET applies, or --plan demo; executors on the
second virtualenv, so the job's code comes only from --py-files), and times
`spark-submit stuck.py` end to end (Spark start included) on local[2] and on the
cluster, with the same --py-files and driver memory. Two cores in both: local[2] runs two task
threads in the driver JVM; the cluster runs two executors (one per worker, 1 core each, the
worker's memory each) beside a driver, all on this machine, so the figure measures the cost of the
cluster machinery (executor start-up, Python workers in a second venv, shuffles over the network
stack), not a speed-up. Prints both wall times and the ratio per size.

--hosts (as root: network namespaces) compares the same standalone cluster on one host against the
cluster on lab hosts, as a deployment on several machines runs it: the master and each worker on a
host of its own, spark-submit (the driver, client mode) on a fourth host the way an Airflow worker
submits, and the data (the same Parquet files, uploaded) and the output on the object store host's
s3proxy, read and written through s3a (hadoop-aws, fleetlab.dists). The one-host run reads and
writes the local disk. Both on this machine, so the figure is the cost of the network hops and the
object store, not of slower machines.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "spark_jobs"), str(REPO / "include"), str(REPO / "bench"), str(REPO / "plugins")]

from measure import run_measured, spark_env  # noqa: E402

# bench/stuck.py's data generator (spark_jobs/ has a module of the same name)
_spec = importlib.util.spec_from_file_location("bench_stuck", REPO / "bench" / "stuck.py")
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)
generate = _bench.generate

from fleetlab import ports, spark_cluster  # noqa: E402


def timed(master: str, snapshots: Path, out: Path, py_files: Path, env: dict) -> dict:
    wall, peak_gb, stdout = run_measured(
        ["spark-submit", "--master", master, "--driver-memory", "4g", "--conf", "spark.ui.enabled=false",
         "--py-files", str(py_files), str(REPO / "spark_jobs" / "stuck.py"),
         "--snapshots", str(snapshots), "--out", str(out), "--window", "15m", "--engine", "spark"], env=env)
    return {"wall_s": wall, "peak_gb": peak_gb, "summary": json.loads(stdout.strip().splitlines()[-1])}


def timed_in(hosts, host: str, master: str, snapshots: str, out: str, py_files: Path, env: dict,
             jars: str | None = None) -> dict:
    """spark-submit inside lab host `host` (its driver on the host's address)."""
    extra = ["--jars", jars] if jars else []
    wall, peak_gb, stdout = run_measured(
        ["ip", "netns", "exec", hosts.netns(host), "spark-submit", "--master", master, "--driver-memory", "4g",
         "--conf", "spark.ui.enabled=false", *extra, "--py-files", str(py_files),
         str(REPO / "spark_jobs" / "stuck.py"), "--snapshots", snapshots, "--out", out,
         "--window", "15m", "--engine", "spark"], env=env)
    return {"wall_s": wall, "peak_gb": peak_gb, "summary": json.loads(stdout.strip().splitlines()[-1])}


def hosts_main(args) -> int:
    """One host against lab hosts: the same cluster shape, the same data."""
    import pyarrow.fs as pafs

    from fleet_airflow.operators.spark import build_py_files
    from fleetkit.core.datasets import ObjectStoreOptions
    from fleetlab import dists, objectstore
    from fleetlab.hosts import Hosts

    work = Path(tempfile.mkdtemp(prefix="bench-stuck-hosts-"))
    plan = ports.DEMO if args.plan == "demo" else ports.tests()
    hosts = Hosts(work / "lab")
    store = cluster = None
    lines = []
    try:
        py_files = build_py_files(work / "py-files")
        jars = ",".join(dists.hadoop_aws_jars())
        addr = hosts.up(["sparkm", "sparkw0", "sparkw1", "store", "worker0"])
        store = objectstore.ObjectStoreSpec(home=work / "store", port=plan.object_store, host=addr["store"],
                                            netns=hosts.netns("store"))
        objectstore.up(store)
        objectstore.create_bucket(store, "bench")
        key, secret = store.credentials()
        options = ObjectStoreOptions(endpoint_url=store.endpoint, region="us-east-1", access_key_id=key,
                                     secret_access_key=secret, source="the benchmark's object store")
        os.environ.update(options.child_env())  # the SDK's settings for a server that is not AWS
        s3 = pafs.S3FileSystem(access_key=key, secret_key=secret, region="us-east-1",
                               endpoint_override=f"{store.host}:{store.port}", scheme="http")
        sizes = [("1M", args.partitions // 10), ("10M", args.partitions)]
        if args.skip_small:
            sizes = sizes[1:]
        for label, parts in sizes:
            data = work / f"snapshots-{label}"
            t = time.monotonic()
            generate(data, parts, args.snapshots)
            rows = parts * args.snapshots
            t = time.monotonic()
            pafs.copy_files(str(data), f"bench/snapshots-{label}", destination_filesystem=s3)
            size_mb = sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 2**20
            print(f"{label}: {rows:,} rows ({size_mb:.0f} MiB of Parquet), uploaded to s3://bench/snapshots-{label} "
                  f"in {time.monotonic() - t:.0f}s", flush=True)
            results = {}
            for layout in ("one host", "hosts"):
                placement = ()
                if layout == "hosts":
                    placement = (("master", addr["sparkm"], hosts.netns("sparkm")),
                                 ("worker-0", addr["sparkw0"], hosts.netns("sparkw0")),
                                 ("worker-1", addr["sparkw1"], hosts.netns("sparkw1")))
                cluster = spark_cluster.SparkClusterSpec.from_plan(work / f"spark-{layout.replace(' ', '-')}", plan,
                                                                   workers=2, worker_memory=args.worker_memory,
                                                                   placement=placement)
                spark_cluster.up(cluster)
                env = {**spark_env(), **spark_cluster.submit_env(cluster)}
                if layout == "one host":
                    r = timed(cluster.master_url, data, work / f"out-one-{label}", py_files, env)
                else:
                    env.update(options.child_env(), SPARK_LOCAL_IP=addr["worker0"])
                    r = timed_in(hosts, "worker0", cluster.master_url, f"s3://bench/snapshots-{label}",
                                 f"s3://bench/out-hosts-{label}", py_files, env, jars)
                for line in spark_cluster.down(cluster):
                    print(f"  {line}")
                cluster = None
                results[layout] = r
                where = ("local Parquet" if layout == "one host" else
                         "master, 2 workers and the driver on 4 lab hosts, data on the object store host")
                print(f"{label} {layout}: wall {r['wall_s']:.1f}s ({where}), statuses {r['summary']['statuses']}",
                      flush=True)
            if results["hosts"]["summary"]["statuses"] != results["one host"]["summary"]["statuses"]:
                raise SystemExit(f"{label}: the verdicts on the hosts differ from those on one host")
            one, many = results["one host"]["wall_s"], results["hosts"]["wall_s"]
            lines.append(f"{label} ({rows:,} rows): one host {one:.1f}s, hosts {many:.1f}s, hosts/one host = "
                         f"{many / one:.2f}x")
        print("RESULT " + "; ".join(lines))
    finally:
        if cluster is not None:
            for line in spark_cluster.down(cluster):
                print(line)
        if store is not None:
            print(f"object store: {objectstore.down(store)}")
        hosts.down()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--snapshots", type=int, default=100)
    ap.add_argument("--worker-memory", default="2g", help="each of the 2 workers (and its executor)")
    ap.add_argument("--skip-small", action="store_true", help="only the 10M rows")
    ap.add_argument("--plan", choices=["tests", "demo"], default="tests",
                    help="the port plan of the benchmark's cluster (demo: beside a test run of the same checkout)")
    ap.add_argument("--hosts", action="store_true",
                    help="one host against lab hosts (network namespaces, root): see the module's docstring")
    args = ap.parse_args()
    if args.hosts:
        return hosts_main(args)

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
            apps = [a for a in spark_cluster.applications(spec) if a["name"] == "stuck"]
            ratio = cluster["wall_s"] / local["wall_s"]
            lines.append(f"{label} ({rows:,} rows): local[2] {local['wall_s']:.1f}s, standalone "
                         f"{cluster['wall_s']:.1f}s, standalone/local = {ratio:.2f}x")
            print(f"{label}: standalone/local[2] wall ratio {ratio:.2f}x (master saw {len(apps)} stuck "
                  f"application(s) so far)", flush=True)
        print("RESULT " + "; ".join(lines))
    finally:
        for line in spark_cluster.down(spec):
            print(line)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
