"""A data root on an object store (s3://fleet/<prefix>) against a real S3-compatible server: the
lab's s3proxy (conftest `object_store`, one per session), reached through an Airflow connection of
type aws named by FLEET_DATA_ROOT_CONN_ID (here a JSON AIRFLOW_CONN_ variable, as the lab writes it).

A collection of the 0.9 lab, the stuck job run in process by its operator, its report and latest
copy, the fleet page, /fleet/metrics and /fleet-reports all go through fleetkit.core.datasets.DataRoot;
a plan is stored and read back; a writer that fails or is killed mid-upload leaves nothing a reader
takes; wrong credentials and a stopped server are one line naming the URI and the connection, no key."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetkit.core import datasets, plans
from fleetkit.core.datasets import DataRoot, DataRootError, data_path, read_dataset

from fleet_airflow import clusters
from tests.integration.fleet_clusters import Target

REPO = Path(__file__).resolve().parents[2]
CONN_ID = "fleet_data_root_test"


def _use_connection(monkeypatch, conn: dict) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))
    monkeypatch.setenv("FLEET_DATA_ROOT_CONN_ID", CONN_ID)
    clusters.install_data_root_store()  # resolved again from the connection at the next s3:// root


@pytest.fixture
def s3_root(object_store, monkeypatch):
    """A fresh prefix of the session's object store as the deployment's data root (removed after)."""
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)  # nothing but the connection gives the keys
    _use_connection(monkeypatch, object_store.connection())
    root = f"s3://fleet/t-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("FLEET_DATA_ROOT", root)
    monkeypatch.delenv("FLEET_PLANS_DIR", raising=False)
    yield root
    try:
        data_path(root).rmtree()
    finally:
        clusters.install_data_root_store()
        shutil.rmtree(object_store.blobs / "fleet" / root.rsplit("/", 1)[1], ignore_errors=True)  # empty folders


def _secrets(spec) -> tuple[str, str]:
    return spec.credentials()


def test_collection_stuck_job_report_page_metrics_and_reports_route_on_s3(lab, s3_root, object_store, unique,
                                                                          tmp_path, monkeypatch):
    from fleet_airflow import fleet_page, plugin
    from fleet_airflow.operators.report import StuckReportOperator
    from fleet_airflow.operators.spark import jobs_dir, spark_job_operator
    from fleet_airflow.web_auth import reader
    from fleetkit.core.settings import run_folder
    from fleetkit.fleetview import FleetView
    from fleetkit.stuck.report import StuckReport

    t = Target(lab)
    topic, group = unique("orders"), unique("s3-grp")
    t.wait_topic(topic)
    t.produce(topic, {0: 10, 1: 20, 2: 5})
    t.commit(group, {(topic, 0): 4, (topic, 1): 20, (topic, 2): 5})
    import dataclasses

    cluster = dataclasses.replace(t.cluster, groups=(group,))
    for _ in range(2):
        result = clusters.collect(cluster, s3_root)
        assert group in result.groups
    rows = [r for r in read_dataset(DataRoot(s3_root), "offsets_snapshots").to_pylist() if r["group"] == group]
    assert sorted((r["partition"], r["committed_offset"], r["log_end_offset"]) for r in rows) == \
        [(0, 4, 10), (0, 4, 10), (1, 20, 20), (1, 20, 20), (2, 5, 5), (2, 5, 5)]
    # the objects are in the store's bucket folder, nothing under a local folder named like the URI
    assert any(object_store.blobs.joinpath("fleet", s3_root.split("/")[-1], "offsets_snapshots").rglob("*.parquet"))
    assert not Path("s3:").exists()

    # the stuck job, run in process by its operator: the keys reach it in its environment, not its argv
    run_id = "manual__2026-01-01T00:00:00+00:00"
    out = str(run_folder(f"{s3_root}/reports", "stuck", run_id))
    op = spark_job_operator("analyse_stuck", "stuck",
                            ["--snapshots", f"{s3_root}/offsets_snapshots", "--out", out, "--window", "15m",
                             "--data-root", s3_root], in_process_input="--snapshots")
    op.application = str(jobs_dir() / "stuck.py")
    assert op._small_input()
    started = []
    real_popen = subprocess.Popen

    def popen(argv, **kw):
        started.append((list(argv), dict(kw.get("env") or {})))
        return real_popen(argv, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    op._run_in_process()
    monkeypatch.setattr(subprocess, "Popen", real_popen)
    (argv, env), = started
    key, secret = _secrets(object_store)
    assert not any(secret in a or key in a for a in argv)
    assert env["AWS_SECRET_ACCESS_KEY"] == secret and env["AWS_ENDPOINT_URL"] == object_store.endpoint
    out_dir = data_path(out)
    assert (out_dir / "_SUCCESS").exists() and (out_dir / "groups.jsonl").is_file()
    assert DataRoot(s3_root).files("stuck_groups")  # the job's datasets, appended on the store

    # the trim_health job (in process, with its trim plan) on the records collected into the store:
    # the fleet page takes its run once marked done
    clusters.collect_offsets_topic(cluster, s3_root)
    health_out = str(run_folder(f"{s3_root}/reports", "offsets", run_id))
    health = spark_job_operator("trim_health", "trim_health",
                                ["--data-root", s3_root, "--fleet", str(lab.fleet_file), "--out", health_out,
                                 "--trim-plan"], in_process_input="--data-root")
    health.application = str(jobs_dir() / "trim_health.py")
    assert health._small_input()
    health._run_in_process()
    assert (data_path(health_out) / "_SUCCESS").exists()
    replicas, run = FleetView(s3_root).offsets_replicas()
    assert run == Path(health_out).name and {r["cluster"] for r in replicas} == {cluster.name}
    (data_path(health_out) / "_SUCCESS").unlink()  # a run not marked done is not taken
    assert FleetView(s3_root).offsets_replicas() == ([], None)
    (data_path(health_out) / "_SUCCESS").write_bytes(b"")

    # the report and its latest copy, on the store
    report = StuckReport.load(out)
    html, _ = report.render(out)
    assert str(html).startswith(s3_root) and html.is_file()
    StuckReportOperator(task_id="report", out_dir=out, fleet_file=lab.fleet_file, data_root=s3_root,
                        window="15m")._publish_latest(html.parent, report)
    view = FleetView(s3_root)
    assert view.group(cluster.name, group) is not None
    assert view.report_file("stuck") is not None

    # the fleet page, its metrics and the reports route read the same store
    monkeypatch.setenv("FLEET_FILE", str(lab.fleet_file))
    monkeypatch.setattr(fleet_page, "require_dag_read", lambda user, dag: None)
    app = fleet_page.fleet_app()
    app.dependency_overrides[reader] = lambda: "reader"
    page = TestClient(app)
    r = page.get("/", params={"q": group})
    assert r.status_code == 200 and group in r.text
    r = page.get("/group", params={"cluster": cluster.name, "group": group})
    assert r.status_code == 200 and topic in r.text
    r = page.get("/metrics")
    assert r.status_code == 200 and 'fleet_report_age_seconds{report="stuck"}' in r.text
    # every partition of the store's newest collection, found by listing the store's folders
    lags = [line for line in r.text.splitlines() if line.startswith("kafka_consumergroup_group_lag{") and
            f'topic="{topic}"' in line and f'cluster_name="{cluster.name}"' in line]
    assert lags, r.text[-3000:]
    assert 'fleet_metrics_source_up{source="collections"} 1.0' in r.text
    monkeypatch.setattr(plugin, "require_dag_read", lambda user, dag: None)
    reports = plugin._reports_app()
    reports.dependency_overrides[reader] = lambda: "reader"
    client = TestClient(reports)
    r = client.get("/stuck/latest/report.html")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "Stuck consumer offsets" in r.text and cluster.name in r.text
    assert client.get(f"/stuck/{Path(out).name}/findings.jsonl").status_code == 200
    assert client.get("/stuck/latest/nothing.html").status_code == 404
    assert client.get("/stuck/../x").status_code in (400, 404)


def test_a_plan_is_stored_and_read_back(s3_root, object_store):
    from fleetkit.core import settings

    plan = {"action": "reset_offsets", "cluster": "lab", "title": "reset g", "preconditions": [],
            "changes": [{"target": "orders-0", "before": 17, "after": 42}], "rollback": {"how": "restore"},
            "dag_id": "runbook_stuck_reset", "run_id": "manual__a:b"}
    path, digest = plans.store(settings.plans_root(), "runbook_stuck_reset", "manual__a:b", plan)
    assert str(path) == f"{s3_root}/plans/runbook_stuck_reset/manual__a~3Ab/plan.json"
    assert plans.load(settings.plans_root(), "runbook_stuck_reset", "manual__a:b") == (plan, digest)
    stored = object_store.blobs.joinpath("fleet", *s3_root.split("/")[3:], "plans", "runbook_stuck_reset",
                                         "manual__a~3Ab", "plan.json")
    assert plans.digest(json.loads(stored.read_bytes())) == digest
    plans.store_result(settings.plans_root(), "runbook_stuck_reset", "manual__a:b", {"done": [1, 2]})
    assert plans.load_result(settings.plans_root(), "runbook_stuck_reset", "manual__a:b") == {"done": [1, 2]}
    with pytest.raises(plans.PlanError, match="no stored plan"):
        plans.load(settings.plans_root(), "runbook_stuck_reset", "another")


def test_a_write_that_fails_leaves_the_old_file_and_no_partial_rows(s3_root):
    dest = data_path(s3_root) / "reports" / "stuck" / "latest" / "groups.jsonl"
    datasets.publish_rows([{"group": "old"}], dest)

    def rows():
        yield {"group": "new-1"}
        raise RuntimeError("the writer failed mid-way")

    with pytest.raises(RuntimeError):
        datasets.publish_rows(rows(), dest)
    assert datasets.read_jsonl(dest) == [{"group": "old"}]

    # a collection whose second dataset fails: nothing of it is visible, no _tmp- object left
    import datetime as dt

    root = DataRoot(s3_root)
    now = dt.datetime.now(dt.timezone.utc)
    good = [{"cluster": "lab", "topic": "a", "partition": 0, "observed_at": now, "leader": 1, "isr": [1],
             "leader_epoch": 1, "controller_epoch": 1, "source": "metadata"}]
    with pytest.raises(Exception):
        datasets.write_collection(root, "lab", now, {"partition_state": good,
                                                     "leader_changes": [{"partition": "not a number"}]})
    assert root.files("partition_state") == []
    assert [i.path for i in root.listing(root.path, recursive=True)
            if i.type.name == "File" and "_tmp-" in i.path.rsplit("/", 1)[-1]] == []


def test_a_writer_killed_mid_upload_leaves_the_old_object(s3_root, object_store, tmp_path):
    """The upload of a 256 MB file is killed (SIGKILL) once the store holds a part of it: the name still
    holds the old content whole, and no other object appears under the root."""
    dest = f"{s3_root}/reports/big.bin"
    writer = tmp_path / "writer.py"
    writer.write_text(
        "import sys\n"
        "from fleetkit.core.datasets import data_path\n"
        "p = data_path(sys.argv[1])\n"
        "p.write_bytes(b'old')\n"
        "print('writing', flush=True)\n"
        "p.write_bytes(b'n' * (256 << 20))\n"
        "print('done', flush=True)\n")
    key, secret = _secrets(object_store)
    env = {"PATH": os.environ["PATH"], "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
           "AWS_ENDPOINT_URL": object_store.endpoint, "AWS_REGION": "us-east-1"}
    proc = subprocess.Popen([sys.executable, str(writer), dest], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "writing"
        bucket = object_store.blobs / "fleet"
        deadline = time.monotonic() + 60
        while not any(bucket.glob(".mpus-*/**/big.bin-*-*")):  # a part of the upload has landed
            assert proc.poll() is None, "the writer ended before a part of its upload landed"
            assert time.monotonic() < deadline, "no part of the upload landed in 60 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert data_path(dest).read_bytes() == b"old"
    names = [i.path for i in DataRoot(s3_root).listing(DataRoot(s3_root).path, recursive=True)
             if i.type.name == "File"]
    assert names == [f"{s3_root[5:]}/reports/big.bin"]


def test_wrong_credentials_and_a_stopped_server_are_one_line_without_secrets(s3_root, object_store, monkeypatch,
                                                                           capsys, tmp_path):
    from fleetctl.cli import main as fleetctl
    from fleetlab import objectstore

    key, secret = _secrets(object_store)
    wrong = dict(object_store.connection(), password="not-the-secret-0123456789")
    _use_connection(monkeypatch, wrong)
    with pytest.raises(DataRootError) as e:
        DataRoot(s3_root)
    text = str(e.value)
    assert "\n" not in text and s3_root in text and f"connection {CONN_ID!r}" in text and "access denied" in text
    assert secret not in text and key not in text and "not-the-secret" not in text
    # fleetctl deploy check names it the same way (exit 2), and says so when it answers
    (tmp_path / "fleet.yaml").write_text('version: 1\nclusters:\n  - {name: lab, kafka_version: "3.9.2", '
                                         'kafka_conn_id: lab_kafka, approvers: [x]}\n')
    monkeypatch.setenv("FLEET_FILE", str(tmp_path / "fleet.yaml"))
    (tmp_path / "locks").mkdir()
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("FLEET_STATE_CONN_ID", raising=False)
    capsys.readouterr()
    assert fleetctl(["deploy", "check"]) == 2
    out, err = capsys.readouterr()
    assert f"error: {text}" in err and secret not in out + err and "not-the-secret" not in out + err

    _use_connection(monkeypatch, object_store.connection())
    DataRoot(s3_root)  # the right ones answer
    assert fleetctl(["deploy", "check"]) == 0
    out, err = capsys.readouterr()
    assert f"data root: {s3_root} (object store at {object_store.endpoint}, credentials from connection " \
           f"{CONN_ID!r}) (reachable)" in out and secret not in out + err
    objectstore.down(object_store)
    try:
        datasets.install_object_store(None)
        _use_connection(monkeypatch, object_store.connection())
        with pytest.raises(DataRootError) as e:
            datasets.read_jsonl(f"{s3_root}/reports/x.jsonl")
        text = str(e.value)
        assert "\n" not in text and s3_root in text and f"connection {CONN_ID!r}" in text
        assert "does not answer" in text and secret not in text and key not in text
    finally:
        objectstore.up(object_store)
