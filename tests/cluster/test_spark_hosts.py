"""Spark on a cluster of lab hosts: a standalone master and two workers, each in a host of its own
(fleetlab.hosts network namespaces), and the stuck job submitted in client mode from a third host,
the Airflow worker's. The driver runs on the submitting host and advertises that host's address
(SPARK_LOCAL_IP, as a deployment's worker sets it), the executors run on the Spark hosts (the
workers' own REST state lists them) and connect back to the driver at that address (each
executor's launch command names it), and the verdicts are the rule table's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from fleet_airflow.operators.spark import build_py_files, driver_conf
from fleetlab import ports, spark_cluster
from fleetlab.hosts import Hosts
from tests.stuck_cases import CASES

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.spark]


def worker_state(address: str, ui_port: int) -> dict:
    with urllib.request.urlopen(f"http://{address}:{ui_port}/json/", timeout=10) as r:
        return json.loads(r.read())


def test_driver_conf_pins_loopback_only_for_a_local_master():
    assert driver_conf("local[*]", {"a": "b"}) == {"a": "b", "spark.driver.host": "127.0.0.1",
                                                  "spark.driver.bindAddress": "127.0.0.1"}
    assert driver_conf("local[2]", {"spark.driver.host": "10.0.0.5"})["spark.driver.host"] == "10.0.0.5"
    # on a cluster the worker's own address (SPARK_LOCAL_IP / its host name) stands
    assert driver_conf("spark://10.1.2.3:7077", {"a": "b"}) == {"a": "b"}
    assert driver_conf("yarn", None) == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI runs as root)")
@pytest.mark.timeout(900)
def test_a_job_submitted_from_a_worker_host_runs_its_executors_on_the_spark_hosts(tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "spark"))
    from test_stuck_job import case_rows, to_jsonl

    hosts = Hosts(tmp_path / "lab")
    spec = None
    try:
        addr = hosts.up(["sparkm", "sparkw0", "sparkw1", "airw0"])
        placement = (("master", addr["sparkm"], hosts.netns("sparkm")),
                     ("worker-0", addr["sparkw0"], hosts.netns("sparkw0")),
                     ("worker-1", addr["sparkw1"], hosts.netns("sparkw1")))
        spec = spark_cluster.SparkClusterSpec.from_plan(tmp_path / "spark", ports.tests(), workers=2,
                                                        worker_memory="512m", placement=placement)
        spark_cluster.up(spec)
        state = spark_cluster.master_state(spec)
        assert spec.master_url == f"spark://{addr['sparkm']}:{spec.master_port}"
        assert sorted(w["host"] for w in state["workers"] if w["state"] == "ALIVE") == sorted(
            [addr["sparkw0"], addr["sparkw1"]])

        py_files = build_py_files(tmp_path / "py-files")
        snapshots = to_jsonl(case_rows(), tmp_path / "snapshots.jsonl")
        env = {"PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}", "HOME": os.environ.get("HOME", "/root"),
               **spark_cluster.submit_env(spec), "SPARK_LOCAL_IP": addr["airw0"]}
        argv = ["spark-submit", "--master", spec.master_url, "--conf", "spark.ui.enabled=false",
                "--conf", "spark.cores.max=2", "--executor-memory", "512m", "--py-files", str(py_files),
                str(REPO / "spark_jobs" / "stuck.py"), "--snapshots", str(snapshots),
                "--out", str(tmp_path / "out"), "--window", "10m", "--as-of", "2026-02-01T00:00:00Z",
                "--engine", "spark"]
        for k, v in driver_conf(spec.master_url, {}).items():  # nothing pinned on a cluster
            argv[3:3] = ["--conf", f"{k}={v}"]
        proc = hosts.run("airw0", argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-4000:]
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["partitions"] == len(CASES)
        assert summary["statuses"]["STALLED"] == sum(1 for c in CASES if c[3] == "STALLED")

        apps = [a for a in spark_cluster.applications(spec) if a["name"] == "stuck"]
        assert [a["state"] for a in apps] == ["FINISHED"], apps
        app_id = apps[0]["id"]
        for i, host in enumerate(("sparkw0", "sparkw1")):
            # the worker's own REST state: an executor of the application ran on this Spark host
            ws = worker_state(addr[host], spec.worker_ui_ports[i])
            ran = [e for e in ws.get("executors", []) + ws.get("finishedexecutors", []) if e.get("appid") == app_id]
            assert ran, (host, ws)
            # and it reached the driver at the submitting host's address, not at a loopback
            stderr = next((spec.home / f"worker-{i}" / "work" / app_id).glob("*/stderr")).read_text()
            assert f"CoarseGrainedScheduler@{addr['airw0']}:" in stderr, stderr[-2000:]
            assert "CoarseGrainedScheduler@127.0.0.1" not in stderr
    finally:
        if spec is not None:
            for line in spark_cluster.down(spec):
                print(line)
        hosts.down()
