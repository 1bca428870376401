"""The stuck job run by Spark (not in process) on a data root on the lab's object store (conftest
`object_store`): Hadoop's s3a connector from FLEET_SPARK_JARS (hadoop-aws of pyspark's Hadoop and its
AWS SDK bundle, pinned and fetched by fleetlab.dists), the store's keys in the job's environment only
(jobs_common.object_store_conf puts them in the session's Hadoop configuration), never its argv or output."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from fleetkit.core import datasets
from fleetkit.core.datasets import DataRoot, ObjectStoreOptions, data_path

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.spark_s3
def test_the_stuck_job_on_spark_reads_and_writes_an_s3_root(object_store):
    from fleetlab import dists

    key, secret = object_store.credentials()
    options = ObjectStoreOptions(object_store.endpoint, "us-east-1", key, secret, source="connection 'test'")
    before = datasets._installed  # (the adapter's resolver, when fleet_airflow was imported)
    datasets.install_object_store(options)
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    root = f"s3://fleet/{prefix}"
    try:
        now = dt.datetime.now(dt.timezone.utc)
        for i in range(3):  # three collections, 5 min apart: the log end moves, the commit does not
            t = now - dt.timedelta(minutes=10 - 5 * i)
            datasets.write_collection(DataRoot(root), "lab", t, {"offsets_snapshots": [
                {"cluster": "lab", "group": "g1", "topic": "orders", "partition": p, "observed_at": t,
                 "committed_offset": 5, "log_start_offset": 0, "log_end_offset": 10 + i, "group_state": "Stable",
                 "assigned": True} for p in range(2)]})
        out = f"{root}/reports/stuck/run-1"
        argv = [sys.executable, str(REPO / "spark_jobs" / "stuck.py"), "--snapshots",
                f"{root}/offsets_snapshots", "--out", out, "--window", "15m", "--engine", "spark"]
        env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "SPARK_LOCAL_IP": "127.0.0.1",
               "FLEET_SPARK_JARS": ",".join(dists.hadoop_aws_jars()), **options.child_env()}
        run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        summary = json.loads(run.stdout.strip().splitlines()[-1])
        assert summary["statuses"] == {"STALLED": 2} and "engine" not in summary  # Spark's summary
        assert secret not in " ".join(argv) + run.stdout + run.stderr
        folder = data_path(out)
        assert (folder / "_SUCCESS").exists()  # written last
        findings = datasets.read_jsonl(folder / "findings.jsonl")
        assert sorted((f["partition"], f["status"]) for f in findings) == [(0, "STALLED"), (1, "STALLED")]
        assert [i.path for i in DataRoot(root).listing(DataRoot(root).path, recursive=True)
                if i.type.name == "File" and "_tmp-" in i.path] == []
    finally:
        try:
            data_path(root).rmtree()
        finally:
            datasets.install_object_store(before)
            shutil.rmtree(object_store.blobs / "fleet" / prefix, ignore_errors=True)
