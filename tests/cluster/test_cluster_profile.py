"""The cluster profile end to end, under the real scheduler: Airflow on CeleryExecutor (Redis
broker, PostgreSQL result backend, two Celery workers) and Spark standalone (a master and two
workers, executors on a Python without the project). fleet_maintenance and an approved
runbook_stuck_reset (approval answered through the REST API) run unchanged; every task that ran
shows a Celery worker's node name as its hostname, and every Spark job is an application of the
standalone master.

The module's fixture switches the tests' Airflow to the cluster profile: it starts it that way
when no Airflow runs (the module run alone), or restarts the running one's scheduler in the
cluster profile and puts the session's profile back afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
from pathlib import Path

import pytest

from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot, read_dataset
from fleetkit.core.settings import run_folder
from fleetlab import spark_cluster
from fleetlab.traffic import commit, produce, wait_topic
from tests.helpers import committed_offsets, fleet_with_stopped_group, wait_until
from tests.ui.approvals import answer, finished, pending_approval, q, settle, trigger

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.airflow, pytest.mark.lab, pytest.mark.spark]


@pytest.fixture(scope="module")
def cluster_airflow(airflow_db, lab, tmp_path_factory):
    """The tests' Airflow in the cluster profile, scheduled runs off (the module's own runs are the
    only ones), for this module."""
    from fleetlab import airflow_services as services

    before = services.running_profile()
    # every stuck analysis and offsets health goes to the standalone master, small input or not: this
    # module proves the Spark path on a cluster (the in-process ones: tests/spark/test_*_inprocess.py)
    env = {"AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False", "FLEET_STUCK_INPROCESS_MAX_ROWS": "0",
           "FLEET_TRIM_INPROCESS_MAX_ROWS": "0"}
    if before is None:  # what airflow_server (tests/conftest.py) sets for the Airflow it starts
        env.update({"FLEET_LOCK_DIR": str(tmp_path_factory.mktemp("locks")),
                    "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "3"})
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        services.up(write_env_file=False, profile_name="cluster")
        yield services
    finally:
        if before is None:
            for line in services.down(database=False):
                print(line)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if before is not None:
            services.up(write_env_file=False, profile_name=before)


def wait_for(fn, timeout, what):
    # OSError: an HTTP error, or an api-server too busy to answer within the client's timeout
    return wait_until(fn, timeout, what, interval=2, retry_on=(urllib.error.HTTPError, OSError))


def run_state(api, dag_id: str, run_id: str) -> str | None:
    state = api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{q(run_id)}")["state"]
    return state if state in ("success", "failed") else None


def task_instances(api, dag_id: str, run_id: str) -> list[dict]:
    return api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{q(run_id)}/taskInstances?limit=100")["task_instances"]


def fail_leftover_runs(api, dag_id: str) -> None:
    """Runs left queued or running by an interrupted session would go first (max_active_runs):
    mark them failed, as an operator would."""
    for state in ("running", "queued"):
        for run in api("GET", f"/api/v2/dags/{dag_id}/dagRuns?state={state}")["dag_runs"]:
            api("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{q(run['dag_run_id'])}", {"state": "failed"})


def assert_ran_on_celery_workers(services, tis: list[dict]) -> set[str]:
    """Every task instance that ran names a Celery worker of the profile as its hostname (empty
    operators are never sent to an executor). Returns the hostnames seen."""
    workers = set(services.celery_hostnames())
    ran = [t for t in tis if t["operator"] != "EmptyOperator"]
    assert ran, tis
    where = {(t["task_id"], t["map_index"]): t["hostname"] for t in ran}
    assert set(where.values()) <= workers, where
    return set(where.values())


def spark_apps_since(services, since_ms: int) -> list[dict]:
    return [a for a in spark_cluster.applications(services.spark_spec()) if a["starttime"] >= since_ms]


def test_the_executors_python_holds_no_project_code():
    python = spark_cluster.ensure_exec_venv()
    no_project = subprocess.run([str(python), "-c", "import fleetkit"], capture_output=True, text=True)
    assert no_project.returncode != 0 and "No module named 'fleetkit'" in no_project.stderr
    versions = subprocess.run([str(python), "-c", "import json, pyspark, pandas, pyarrow, numpy; print(json.dumps("
                               "{m.__name__: m.__version__ for m in (pyspark, pandas, pyarrow, numpy)}))"],
                              capture_output=True, text=True, check=True)
    assert json.loads(versions.stdout) == spark_cluster.locked_versions()


def test_a_submitted_job_keeps_the_submitted_master(tmp_path):
    """spark-submit --master X: the job's session (jobs_common.session) runs on X, not local[*]."""
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nsys.path.insert(0, %r)\nfrom jobs_common import session\n"
                     "s = session('probe')\nprint('MASTER', s.sparkContext.master)\ns.stop()\n"
                     % str(REPO / "spark_jobs"))
    out = subprocess.run([str(REPO / ".venv" / "bin" / "spark-submit"), "--master", "local[1]",
                          "--conf", "spark.ui.enabled=false", str(probe)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "MASTER local[1]" in out.stdout.splitlines(), out.stdout


@pytest.mark.timeout(1800)  # the lab, Airflow, Redis, Celery and Spark start in its setup
def test_fleet_maintenance_on_celery_and_spark_standalone(cluster_airflow, lab, tmp_path, unique):
    services = cluster_airflow
    api = services.api
    topic, group = unique("cluster"), unique("cluster-group")
    # the fleet file and the data root are the deployment's (FLEET_FILE, FLEET_DATA_ROOT: the
    # servers were started with them; a run cannot choose either). The stopped group must be in the
    # fleet file (0.9 forgets a group without members): the deployment's lists it during the run.
    # Every Spark worker reads and writes the data root: on one machine, the same local folder.
    deployment_fleet = Path(os.environ["FLEET_FILE"])
    assert lab.fleet_file == deployment_fleet
    data = Path(os.environ["FLEET_DATA_ROOT"])
    before = deployment_fleet.read_text()
    deployment_fleet.write_text(fleet_with_stopped_group(lab, tmp_path, topic, group).read_text())

    dag_id = "fleet_maintenance"
    try:
        wait_for(lambda: api("GET", f"/api/v2/dags/{dag_id}"), 180, "the DAG parsed by the dag-processor")
        api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        fail_leftover_runs(api, dag_id)
        since_ms = int(time.time() * 1000) - 5000
        run = api("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                  {"logical_date": None, "conf": {"offsets_health": "always", "window": "2m"}})
        state = wait_for(lambda: run_state(api, dag_id, run["dag_run_id"]), 900, "fleet_maintenance to finish")
    finally:
        deployment_fleet.write_text(before)
    tis = task_instances(api, dag_id, run["dag_run_id"])
    assert state == "success", [(t["task_id"], t["map_index"], t["state"]) for t in tis]
    assert {t["state"] for t in tis} == {"success"}, [(t["task_id"], t["state"]) for t in tis]
    hosts = assert_ran_on_celery_workers(services, tis)
    print(f"fleet_maintenance tasks ran on {sorted(hosts)}")

    apps = spark_apps_since(services, since_ms)
    finished_apps = {a["name"] for a in apps if a["state"] == "FINISHED"}
    assert {"trim_health", "stuck"} <= finished_apps, apps  # trim_health writes the trim plan too

    # the jobs computed on the executors what they compute locally (tests/dags/test_dags.py)
    rows = [r for r in read_dataset(DataRoot(data), "offsets_snapshots").to_pylist() if r["group"] == group]
    assert sorted((r["partition"], r["committed_offset"], r["log_end_offset"]) for r in rows) == [(0, 6, 6), (2, 0, 1)]
    out = run_folder(data / "reports", "offsets", run["dag_run_id"])
    health = [h for h in map(json.loads, (out / "health.jsonl").read_text().splitlines())
              if h["cluster"] == "labtest"]
    assert len(health) == 150 and {h["verdict"] for h in health} == {"HEALTHY"}
    stuck = run_folder(data / "reports", "stuck", run["dag_run_id"])
    assert (stuck / "report.html").exists(), sorted(p.name for p in stuck.iterdir())


@pytest.mark.timeout(1200)
def test_an_approved_reset_runs_on_the_celery_workers(cluster_airflow, lab, unique):
    services = cluster_airflow
    topic, group = unique("cluster-reset"), unique("cluster-reset-group")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 10, 1: 10, 2: 10})
    commit(lab.bootstrap, group, {(topic, 0): 2, (topic, 1): 2, (topic, 2): 2})
    api = services.api
    dag_id = "runbook_stuck_reset"
    wait_for(lambda: api("GET", f"/api/v2/dags/{dag_id}"), 180, "the DAG parsed by the dag-processor")
    api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    fail_leftover_runs(api, dag_id)
    case = {"api": api, "airflow": services, "dag_id": dag_id,
            "conf": {"cluster": "labtest", "group": group, "topic": topic, "partitions": "0", "target": "offset 7",
                     "dry_run": False}}

    run_id = trigger(case)  # as admin
    detail = wait_for(lambda: pending_approval(case, run_id), 300, "the approval request")
    assert "reset_offsets on cluster labtest" in detail["subject"]
    assert committed_offsets(lab.bootstrap, group, topic) == {0: 2, 1: 2, 2: 2}
    settle(case, run_id)
    answer(case, run_id, "Approve", user="approver")
    assert wait_for(lambda: finished(case, run_id), 300, "the run to finish") == "success"
    assert committed_offsets(lab.bootstrap, group, topic) == {0: 7, 1: 2, 2: 2}

    tis = task_instances(api, dag_id, run_id)
    hosts = assert_ran_on_celery_workers(services, tis)
    by_task = {t["task_id"]: t for t in tis}
    assert by_task["execute"]["state"] == "success" and by_task["execute"]["hostname"] in hosts
    print(f"runbook_stuck_reset tasks ran on {sorted(hosts)}")
    events = [(r["event"], r["actor"]) for r in audit.records(DataRoot(os.environ["FLEET_DATA_ROOT"]), "labtest", run_id)]
    assert events == [("planned", "admin"), ("approved", "approver"), ("executed", "approver"), ("verified", None)]
