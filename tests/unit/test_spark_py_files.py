"""The Spark jobs' --py-files zip (fleet_airflow.operators.spark): what it holds, that it is built
from the current sources at every submission, and that the library imports from it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def names(zip_path: Path) -> set[str]:
    with zipfile.ZipFile(zip_path) as z:
        return set(z.namelist())


def fake_tree(root: Path) -> tuple[Path, Path]:
    lib, jobs = root / "include" / "fleetkit", root / "spark_jobs"
    (lib / "core" / "__pycache__").mkdir(parents=True)
    jobs.mkdir()
    (lib / "__init__.py").write_text("")
    (lib / "core" / "__init__.py").write_text("")
    (lib / "core" / "thing.py").write_text("VALUE = 1\n")
    (lib / "core" / "__pycache__" / "thing.cpython-311.pyc").write_bytes(b"\0")
    (lib / "core" / "notes.txt").write_text("not code")
    (jobs / "__init__.py").write_text("")
    (jobs / "jobs_common.py").write_text("SHARED = 1\n")
    (jobs / "a_job.py").write_text("import jobs_common\n")
    return lib, jobs


def test_zip_of_the_checkout_holds_the_whole_library_and_the_jobs_modules(tmp_path):
    from fleet_airflow.operators.spark import build_py_files

    zip_path = build_py_files(tmp_path)
    got = names(zip_path)
    lib = REPO / "include" / "fleetkit"
    expected_lib = {f"fleetkit/{f.relative_to(lib).as_posix()}" for f in lib.rglob("*.py")
                    if "__pycache__" not in f.parts}
    assert expected_lib <= got
    for package in ("core", "clients", "collection", "stuck", "trim", "ownership", "group_ids"):
        assert f"fleetkit/{package}/__init__.py" in got
    assert {"fleetkit/__init__.py", "fleetkit/core/datasets.py", "jobs_common.py",
            "trim_health.py"} <= got  # trim_plan imports trim_health
    assert all(n.endswith(".py") for n in got), sorted(n for n in got if not n.endswith(".py"))
    assert not any("__pycache__" in n or n.startswith(("templates/", "include/")) for n in got)
    assert "__init__.py" not in got  # spark_jobs' package marker would make the zip a package
    assert list(tmp_path.iterdir()) == [zip_path]  # no temporary file left beside it


def test_a_changed_source_is_in_the_next_zip(tmp_path):
    from fleet_airflow.operators.spark import build_py_files

    lib, jobs = fake_tree(tmp_path / "src")
    first = build_py_files(tmp_path / "a", lib, jobs)
    assert names(first) == {"fleetkit/__init__.py", "fleetkit/core/__init__.py", "fleetkit/core/thing.py",
                            "jobs_common.py", "a_job.py"}
    (lib / "core" / "thing.py").write_text("VALUE = 2\n")
    (lib / "core" / "new.py").write_text("NEW = True\n")
    (jobs / "a_job.py").unlink()
    second = build_py_files(tmp_path / "a", lib, jobs)  # same folder: replaced, not appended to
    assert second == first
    with zipfile.ZipFile(second) as z:
        assert z.read("fleetkit/core/thing.py") == b"VALUE = 2\n"
        assert set(z.namelist()) == {"fleetkit/__init__.py", "fleetkit/core/__init__.py", "fleetkit/core/thing.py",
                                     "fleetkit/core/new.py", "jobs_common.py"}


def test_not_a_package_is_refused(tmp_path):
    from fleet_airflow.operators.spark import build_py_files

    (tmp_path / "lib").mkdir()
    with pytest.raises(FileNotFoundError, match="no __init__.py"):
        build_py_files(tmp_path / "out", tmp_path / "lib", tmp_path)


def test_the_library_imports_from_the_zip(tmp_path):
    from fleet_airflow.operators.spark import build_py_files

    zip_path = build_py_files(tmp_path)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "import fleetkit.core.durations, fleetkit.stuck.rules; print(fleetkit.core.durations.__file__)")
    out = subprocess.run([sys.executable, "-c", code, str(zip_path)], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"{zip_path}/fleetkit/core/durations.py"


def test_the_operator_builds_the_zip_when_it_runs_and_removes_it_after(tmp_path, monkeypatch):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from fleet_airflow import settings
    from fleet_airflow.operators import spark as spark_ops

    lib, jobs = fake_tree(tmp_path / "src")
    monkeypatch.setattr(spark_ops, "library_dir", lambda: lib)
    op = spark_ops.spark_job_operator("analyse", "stuck", ["--out", "x"], py_files="/extra/deps.zip",
                                      trigger_rule="all_done")
    assert (op.task_id, op.name, op._conn_id, op.application_args, op.trigger_rule) == \
        ("analyse", "stuck", "spark_default", ["--out", "x"], "all_done")
    # nothing of the parsing host is kept: the job's path and the environment are the worker's, made
    # when the task runs
    assert op.application == "stuck.py" and op.env_vars is None
    assert op.conf == {"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"}
    assert op.py_files == "/extra/deps.zip"  # nothing built when the DAG is parsed

    seen = []

    def submit(self, context):
        extra, built = self.py_files.split(",")
        assert extra == "/extra/deps.zip" and self._hook is None
        # the installed package's job file, and the worker's environment
        import fleet_spark_jobs

        assert self.application == str(Path(fleet_spark_jobs.__file__).resolve().parent / "stuck.py")
        assert Path(self.application).is_file()
        with zipfile.ZipFile(built) as z:
            seen.append((built, z.read("fleetkit/core/thing.py")))

    monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
    op.execute({})
    (lib / "core" / "thing.py").write_text("VALUE = 3\n")
    op.py_files = "/extra/deps.zip"
    op.execute({})
    assert [content for _, content in seen] == [b"VALUE = 1\n", b"VALUE = 3\n"]
    assert not any(Path(built).parent.exists() for built, _ in seen)


@pytest.mark.parametrize("job", ["stuck.py", "../x", "a/b", ""])
def test_job_is_a_module_name_of_spark_jobs(job):
    from fleet_airflow.operators.spark import spark_job_operator

    with pytest.raises(ValueError, match="module name"):
        spark_job_operator("t", job, [])


def test_a_small_stuck_input_runs_in_process_and_a_large_one_through_spark_submit(tmp_path, monkeypatch):
    """analyse_stuck's operator: a small input on a local path runs the job under the worker's Python
    (no spark-submit, no JVM: JAVA_HOME points nowhere) and writes the job's files; above
    FLEET_STUCK_INPROCESS_MAX_ROWS it goes to spark-submit."""
    import datetime as dt
    import json

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from fleet_airflow.operators import spark as spark_ops

    snaps = tmp_path / "offsets_snapshots" / "cluster=c1" / f"date={dt.date.today().isoformat()}"
    snaps.mkdir(parents=True)
    at = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    with open(snaps / "part-1.jsonl", "w") as f:
        for i in range(4):
            t = (at - dt.timedelta(seconds=60 * i)).isoformat().replace("+00:00", "Z")
            f.write(json.dumps({"cluster": "c1", "group": "g", "topic": "t", "partition": 0, "observed_at": t,
                                "committed_offset": 5, "log_start_offset": 0, "log_end_offset": 9,
                                "group_state": "Stable", "assigned": True}) + "\n")
    out = tmp_path / "out"
    op = spark_ops.spark_job_operator(
        "analyse_stuck", "stuck",
        ["--snapshots", str(tmp_path / "offsets_snapshots"), "--out", str(out), "--window", "4m",
         "--recent-days", "2"], in_process_input="--snapshots")
    submitted = []
    monkeypatch.setattr(SparkSubmitOperator, "execute",
                        lambda self, context: submitted.append((self.task_id, self.application_args[-2:])))
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    op.execute({})
    assert submitted == []
    (finding,) = [json.loads(x) for x in (out / "findings.jsonl").read_text().splitlines()]
    assert (finding["group"], finding["status"], finding["lag"]) == ("g", "STALLED", 4)
    monkeypatch.setenv("FLEET_STUCK_INPROCESS_MAX_ROWS", "3")
    op.execute({})
    # the choice is made once, here: the job under spark-submit is told, not left to judge again
    assert submitted == [("analyse_stuck", ["--engine", "spark"])]
    op.execute({})
    assert op.application_args.count("--engine") == 1


def test_killing_the_task_stops_the_job_it_runs_in_process(tmp_path):
    """on_kill ends the in-process job by its PID (SIGTERM; SIGKILL after the grace period)."""
    import threading
    import time

    from fleet_airflow.operators import spark as spark_ops

    job = tmp_path / "slow_job.py"
    job.write_text("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('started', flush=True)\n"
                   "time.sleep(120)\n")
    op = spark_ops.spark_job_operator("analyse_stuck", "stuck", [], in_process_input="--snapshots")
    op.application = str(job)
    op.KILL_GRACE_SECONDS = 1.0
    errors = []

    def run():
        try:
            op._run_in_process()
        except Exception as e:  # noqa: BLE001 - the killed job's exit is the task's error
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 30
    while op._in_process is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    op.on_kill()  # the job ignores SIGTERM: killed after the grace period
    t.join(30)
    assert not t.is_alive() and op._in_process.returncode == -9  # SIGKILLed after the grace period
    assert errors and "exited with code -9" in str(errors[0])


def test_a_small_offsets_data_root_is_judged_in_process_and_a_large_one_through_spark_submit(tmp_path, monkeypatch):
    """trim_health's operator (fleet_maintenance, runbook_trim): a data root of few
    __consumer_offsets records runs the job under the worker's Python (JAVA_HOME points nowhere)
    and writes health.jsonl and trim_plan.json; above FLEET_TRIM_INPROCESS_MAX_ROWS it goes
    to spark-submit."""
    import json

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from fleet_airflow.operators import spark as spark_ops
    from tests.spark.test_trim_inprocess import write_root

    root = tmp_path / "data"
    fleet = write_root(root)
    out = tmp_path / "out"
    op = spark_ops.spark_job_operator(
        "trim_health", "trim_health",
        ["--data-root", str(root), "--fleet", str(fleet), "--out", str(out), "--bloat-ratio", "3",
         "--min-bloat-bytes", "0", "--trim-plan"], in_process_input="--data-root")
    submitted = []
    monkeypatch.setattr(SparkSubmitOperator, "execute",
                        lambda self, context: submitted.append((self.task_id, self.application_args[-2:])))
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    monkeypatch.delenv("FLEET_TRIM_INPROCESS_MAX_ROWS", raising=False)
    op.execute({})
    assert submitted == []
    health = {(r["cluster"], r["broker"], r["partition"]): r
              for r in map(json.loads, (out / "health.jsonl").read_text().splitlines())}
    assert health[("c1", 0, 0)]["verdict"] == "CLEANER_STALLED"  # the checkpoint never moved
    plans = json.loads((out / "trim_plan.json").read_text())
    c1 = next(c for c in plans if c["cluster"] == "c1")
    assert [b["quarantine"] != [] for b in c1["partitions"][0]["replicas"]] == [True, True]
    monkeypatch.setenv("FLEET_TRIM_INPROCESS_MAX_ROWS", "10")
    op.execute({})
    assert submitted == [("trim_health", ["--engine", "spark"])]


SECRETS = {"AIRFLOW_VAR_FLEET_AUDIT_KEY": "k:audit-secret-0123456789abcdef0123456789",
           "AIRFLOW__CORE__FERNET_KEY": "fernet-secret", "AIRFLOW__API_AUTH__JWT_SECRET": "jwt-secret",
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://u:db-secret@h/db",
           "AIRFLOW_CONN_PROD_KAFKA": '{"extra": {"sasl.password": "kafka-secret"}}',
           "FLEET_AIRFLOW_PASSWORD": "airflow-secret", "AIRFLOW_API_TOKEN": "token-secret",
           "FLEET_SPARK_SECRET_KEY": "named-like-a-secret"}


def test_a_jobs_environment_holds_no_secret(monkeypatch):
    """A job reads datasets and writes files: it gets the system's, Spark's, Java's and the toolkit's
    variables, never Airflow's secrets, connections or the audit key."""
    from fleet_airflow import settings

    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SPARK_CONF_DIR", "/etc/spark")
    monkeypatch.setenv("FLEET_STUCK_INPROCESS_MAX_ROWS", "5")
    monkeypatch.setenv("FLEET_SPARK_PYTHON", "/opt/exec/bin/python")
    env = settings.job_env()
    assert not set(SECRETS) & set(env)
    assert not [v for v in env.values() if "secret" in v]
    assert env["SPARK_CONF_DIR"] == "/etc/spark" and env["FLEET_STUCK_INPROCESS_MAX_ROWS"] == "5"
    assert env["PYSPARK_PYTHON"] == "/opt/exec/bin/python"
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)


def test_spark_submit_is_started_with_the_jobs_environment_only(monkeypatch):
    """The provider's hook starts spark-submit with a copy of the task's whole environment when it is
    given env_vars; the toolkit's operator gives it the job's own environment instead."""
    from airflow.providers.apache.spark.hooks import spark_submit as hook_module

    from fleet_airflow.operators import spark as spark_ops

    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    seen = {}

    class Stop(Exception):
        pass

    def popen(argv, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(hook_module.subprocess, "Popen", popen)
    op = spark_ops.spark_job_operator("analyse", "stuck", ["--out", "x"])
    hook = op._get_hook()
    with pytest.raises(Stop):
        hook.submit(str(spark_ops.jobs_dir() / "stuck.py"))
    assert "env" in seen and not set(SECRETS) & set(seen["env"])
    assert not [v for v in seen["env"].values() if "secret" in v]
