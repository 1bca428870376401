"""Secrets stay secret, on the secured Kafka 4.3 cluster of the test fleet.

Every password of the cluster's logins (the read-only `fleet`, the runbooks' `fleet-runbook`, the
lab's `admin`) is a canary: random, generated at the lab's first start, used in every connection.
After a run like `make demo`'s (fleet_maintenance with the Spark stuck job, one approved
runbook_stuck_reset, the fleet page, the incident CLI, and a CLI run with a wrong canary
password), none of them appears in a log, a report or dataset, the audit, XCom, a rendered
template, the metadata database, the CLI's output, an error message, or any process's command
line (sampled every 100 ms while the run goes on: spark-submit's arguments included).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import psutil
import pytest

from fleetlab.traffic import commit, produce, wait_topic
from tests.conftest import TEST_AIRFLOW_HOME, write_fleet_file
from fleetlab.hitl import Answerer, run_dag, task_states

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(900)]
CLUSTER = "lab43test"
WRONG = "canary-wrong-password-5f1c9e"


class CommandLines(threading.Thread):
    """Every process command line seen while it runs (sampled every 100 ms: spark-submit and the
    CLI live for seconds; a tighter loop took a fifth of a core from the run it watches)."""

    def __init__(self):
        super().__init__(daemon=True, name="cmdline-sampler")
        self.seen: set[str] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for p in psutil.process_iter(["cmdline"]):
                try:
                    self.seen.add(" ".join(p.info["cmdline"] or ()))
                except (psutil.Error, TypeError):
                    pass
            self.stop.wait(0.1)


def files_holding(secrets: list[str], *roots: Path) -> list[str]:
    """Files under roots whose bytes contain one of the secrets (binary files too: Parquet)."""
    needles = [s.encode() for s in secrets]
    hits = []
    for root in roots:
        if not root.exists():
            continue
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                hits.extend(f"{path} holds the password of {secrets[needles.index(n)][:3]}..." for n in needles
                            if n in data)
    return hits


def database_text() -> str:
    """The metadata database's rows a run writes (XCom, rendered templates, runs, task instances,
    approvals, the log table), as text."""
    from sqlalchemy import text
    from airflow.settings import Session

    out = []
    with Session() as s:
        tables = [r[0] for r in s.execute(text(
            "select table_name from information_schema.tables where table_schema = 'public'"))]
        for t in tables:
            if t in ("xcom", "rendered_task_instance_fields", "dag_run", "task_instance", "hitl_detail", "log",
                     "task_instance_history", "trigger", "variable", "connection"):
                out.extend(str(r[0]) for r in s.execute(text(f'select t::text from "{t}" t')))
    return "\n".join(out)


@pytest.fixture(scope="module")
def secured(lab_fleet):
    handle = lab_fleet(CLUSTER)
    assert handle.spec.secured, "the 4.3 cluster of the test fleet runs SASL_SSL"
    return handle


def test_no_password_anywhere_after_a_demo_like_run(secured, dagbag, tmp_path, unique, monkeypatch, capfd, caplog):
    spec = secured.spec
    secrets = sorted(spec.passwords().values())
    assert len(secrets) >= 3 and all(len(s) >= 16 for s in secrets)
    admin = spec.security_config("admin")
    topic, group = unique("canary-orders"), unique("canary-billing")
    wait_topic(spec.bootstrap, topic, kafka_version=spec.kafka_version, security=admin)
    produce(spec.bootstrap, topic, {0: 20, 1: 20, 2: 20}, kafka_version=spec.kafka_version, security=admin)
    commit(spec.bootstrap, group, {(topic, p): 5 for p in range(3)}, kafka_version=spec.kafka_version,
           security=admin)

    data = tmp_path / "data"
    fleet_file = write_fleet_file(spec, tmp_path / "fleet.yaml")  # this cluster only
    monkeypatch.setenv("FLEET_FILE", str(fleet_file))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    # the stuck job through spark-submit (its --conf and --py-files arguments are the wider surface),
    # not in process as a small input would run
    monkeypatch.setenv("FLEET_STUCK_INPROCESS_MAX_ROWS", "0")
    sampler = CommandLines()
    sampler.start()
    cli_out = []
    try:
        maintenance = dagbag.get_dag("fleet_maintenance")
        for _ in range(2):
            dr = maintenance.test(run_conf={"window": "2m", "offsets_health": "always"})
            assert dr.state == "success", task_states(dr)

        reset = dagbag.get_dag("runbook_stuck_reset")
        conf = {"cluster": CLUSTER, "group": group, "topic": topic, "partitions": "0,1", "target": "skip 1",
                "dry_run": False}
        dr = run_dag(reset, conf, Answerer("runbook_stuck_reset", "Approve", user="approver"))
        assert dr.state == "success", task_states(dr)

        from fleet_airflow import fleet_page

        page = str(fleet_page._page("fleet_page.html.j2", **fleet_page.overview_context(
            fleet_page._view(), fleet_page._fleet(), CLUSTER), user="admin").body, "utf-8")
        assert CLUSTER in page
        cli_out.append(page)

        fleetctl = str(REPO / ".venv" / "bin" / "fleetctl")
        for args in (["lag", "--cluster", CLUSTER, group], ["stuck", "--cluster", CLUSTER],
                     ["offsets", "health", "--cluster", CLUSTER], ["coordinator", "who", "--cluster", CLUSTER, group]):
            r = subprocess.run([fleetctl, *args], capture_output=True, text=True, timeout=180)
            # 0 nothing flagged, 3 flagged, 5 not judged yet (lag / stuck with little history): answers
            assert r.returncode in (0, 3, 5), (args, r.returncode, r.stdout[-2000:], r.stderr[-2000:])
            cli_out.append(r.stdout + r.stderr)
        # a wrong password: the error names the login, never the password given
        env = dict(os.environ)
        conn = f"AIRFLOW_CONN_{spec.kafka_conn_id.upper()}"
        wrong = json.loads(env[conn])
        wrong["extra"]["sasl.password"] = WRONG
        env[conn] = json.dumps(wrong)
        r = subprocess.run([fleetctl, "lag", "--cluster", CLUSTER, group], capture_output=True, text=True,
                           timeout=120, env=env)
        assert r.returncode == 4 and "authentication failed for fleet" in r.stderr, r.stdout + r.stderr
        cli_out.append(r.stdout + r.stderr)
    finally:
        sampler.stop.set()
        sampler.join(5)

    everything = secrets + [WRONG]
    captured = capfd.readouterr()
    texts = {
        "captured output": captured.out + captured.err,
        "log records": "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records),
        "the fleet page and the CLI": "\n".join(cli_out),
        "the metadata database": database_text(),
        "process command lines": "\n".join(sampler.seen),
    }
    leaks = [f"{where} holds the password of {s[:3]}..." for where, t in texts.items() for s in everything if s in t]
    leaks += files_holding(everything, data, TEST_AIRFLOW_HOME / "logs", TEST_AIRFLOW_HOME / "data",
                           tmp_path / "locks")
    assert not leaks, "\n".join(leaks)
    # the sampler saw the Spark job (the check covered spark-submit's arguments)
    assert any("spark" in c.lower() and "stuck" in c for c in sampler.seen), "no spark-submit seen"
    assert (data / "audit").exists() and any((data / "reports").rglob("*")), "the run wrote no audit or reports"


def test_the_search_finds_a_planted_password(tmp_path):
    """The file search above is able to fail."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.parquet").write_bytes(b"\x00PAR1" + b"s3cret-canary-value" + b"\x00")
    assert files_holding(["s3cret-canary-value"], tmp_path)
    assert not files_holding(["other-canary-value"], tmp_path)
