"""The demo's own logic: the time per step, the Spark start-up / job split read from a task's log,
which run makes the first collection, the stuck report it shows (pure: no lab, no Airflow)."""

from __future__ import annotations

import datetime as dt
import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetlab import demo
from fleetlab.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2026, 11, 23, 16, 40, tzinfo=dt.timezone.utc)


def ts(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def test_fmt_seconds():
    assert demo.fmt_seconds(4.04) == "4.0s"
    assert demo.fmt_seconds(59.94) == "59.9s"
    assert demo.fmt_seconds(185) == "3m05s"
    assert demo.fmt_seconds(600) == "10m00s"


def test_clock_records_steps_and_prints_progress_with_elapsed_time():
    out = io.StringIO()
    clock = demo.Clock(started_at=1000.0, out=out)
    clock.record("setup check", 4.2)
    with clock.step("lab up", "in parallel"):
        pass
    names = [s[0] for s in clock.steps]
    assert names == ["setup check", "lab up"]
    assert clock.steps[1][2] == "in parallel"
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("lab up ...") and lines[1].split("] ", 1)[1].startswith("lab up: done in ")
    assert all(line.startswith("[") for line in lines)  # every progress line carries the elapsed time
    table = clock.table()
    assert table[0].split() == ["setup", "check", "4.2s"]
    assert table[-1].split()[0] == "total"


def spark_log(submit_at: float, ready_at: float, end_at: float) -> list[dict]:
    return [{"timestamp": ts(submit_at - 1), "event": "::group::Pre Execute"},
            {"timestamp": ts(submit_at), "event": "Spark-Submit cmd: spark-submit --master local[*] ..."},
            {"timestamp": ts(submit_at + 5), "event": "INFO SparkContext: Running Spark version 4.2.0"},
            {"timestamp": ts(ready_at), "event": "INFO BlockManager: Initialized BlockManager: BlockManagerId(...)"},
            {"event": "a line without a timestamp"},
            "not an event",
            {"timestamp": ts(end_at), "event": '{"statuses": {"OK": 14}, "seconds": 56.2}'}]


def test_spark_split_start_up_and_job():
    assert demo.spark_split(spark_log(10, 24.5, 75)) == (14.5, 50.5)


def test_spark_split_without_the_markers_is_none():
    assert demo.spark_split([{"timestamp": ts(1), "event": "Spark-Submit cmd: spark-submit"}]) is None
    assert demo.spark_split([]) is None


def test_describe_task_lines():
    ti = {"task_id": "analyse_stuck", "map_index": -1, "state": "success", "queued_when": ts(0),
          "start_date": ts(0.5), "end_date": ts(70.5), "operator": "FleetSparkSubmitOperator"}
    assert demo.is_spark_task(ti)
    line = demo.describe_task(ti, spark_log(1, 15, 70.5))
    assert line == "analyse_stuck success: queued 0.5s, ran 1m10s (spark-submit start-up 14.0s, job 55.5s)"
    mapped = dict(ti, task_id="collect", map_index=0, rendered_map_index="lab", operator="CollectClusterOperator")
    assert not demo.is_spark_task(mapped)
    assert demo.describe_task(mapped) == "collect[lab] success: queued 0.5s, ran 1m10s"
    assert demo.describe_task(dict(ti, state="skipped", start_date=ts(3), end_date=ts(3))) == "analyse_stuck skipped"


@pytest.mark.parametrize("due_in, active, expected", [
    (None, [], ("trigger", 0.0)),            # no schedule known: the demo triggers
    (200, [], ("trigger", 0.0)),             # next scheduled run after the demo's two runs
    (30, [], ("wait", 30.0)),                # due soon: it makes the first collection
    (-120, [], ("wait", 0.0)),               # due now (the DAG was just unpaused)
    (30, [{"dag_run_id": "scheduled__x"}], ("use", 0.0)),  # already queued or running
])
def test_first_run_choice(due_in, active, expected):
    nxt = T0 + dt.timedelta(seconds=due_in) if due_in is not None else None
    assert demo.first_run_choice(T0, nxt, active) == expected


def test_the_final_run_waits_at_least_half_the_window_after_the_first_collection():
    from fleetkit.core.durations import parse_duration

    assert demo.GAP_SECONDS >= parse_duration(demo.WINDOW).total_seconds() / 2
    confs = (demo.FIRST_CONF, demo.FINAL_CONF)
    assert {c["window"] for c in confs} == {demo.WINDOW}
    # the first run's one Spark job is the stuck analysis (it is over before the final run is due);
    # the final run analyses the offsets health, after its verdicts
    assert demo.FIRST_CONF["offsets_health"] == "never" and demo.FINAL_CONF["offsets_health"] == "always"


def test_the_offsets_health_waits_for_the_stuck_verdicts():
    """In fleet_maintenance the health's Spark jobs start once analyse_stuck is over, whatever its
    outcome: the stuck verdicts never share the Spark cores with the hourly health."""
    import ast
    from pathlib import Path

    src = (Path(__file__).resolve().parents[2] / "dags" / "fleet_maintenance.py").read_text()
    edges = [ast.unparse(n) for n in ast.walk(ast.parse(src)) if isinstance(n, ast.BinOp)
             and isinstance(n.op, ast.RShift)]
    assert any(e.startswith("[collect_offsets, analyse] >> health_due()") for e in edges), edges


def test_summary_shows_the_final_runs_stuck_report(tmp_path):
    from fleetkit.core.datasets import DataRoot
    from fleetkit.core.settings import run_folder
    from fleetlab.demo_summary import stuck_run_dir

    root = DataRoot(str(tmp_path))
    base = tmp_path / "reports" / "stuck"
    final, later = "manual__2026-11-23T16:41:31+00:00", "scheduled__2026-11-23T16:45:00+00:00"
    for run in (final, later):  # a scheduled run that finished after the demo's final run
        folder = run_folder(base, run)
        folder.mkdir(parents=True)
        (folder / "report.md").write_text(run)
    assert str(stuck_run_dir(root, final)) == str(run_folder(base, final))  # a DataPath: local or s3:// alike
    assert stuck_run_dir(root, "manual__never-ran") is None
    hostile = "../../etc/passwd\n{{ x }}"
    assert stuck_run_dir(root, hostile) is None
    assert run_folder(base, hostile).resolve().parent == base.resolve()  # looked up inside the reports folder
    assert stuck_run_dir(root, None) is not None  # no run named: the newest
    assert stuck_run_dir(root, None).name == run_folder(base, later).name


@pytest.mark.parametrize("argv", [["airflow", "env"], ["airflow", "up"], ["airflow", "down"], ["airflow", "status"]])
def test_airflow_process_commands_are_the_labs(argv):
    """`make setup` runs `fleetlab airflow env` on every `make demo` (fleetlab imports no Airflow:
    below)."""
    args = build_parser().parse_args(argv)
    assert (args.command, args.action) == tuple(argv)


def test_demo_command_needs_no_airflow_import():
    args = build_parser().parse_args(["demo", "--started-at", "1795452017.5"])
    assert args.started_at == 1795452017.5
    code = "import fleetlab.demo, fleetlab.cli, fleetctl.cli; print('ok')"
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    heavy = [line for line in out.stderr.splitlines()
             if line.rsplit("|", 1)[-1].strip().split(".")[0] in ("airflow", "pyspark", "confluent_kafka")]
    assert heavy == []


class RecordedApi:
    """What the REST API of Airflow 3.3.2 answered, call after call, for a run whose mapped `collect`
    is listed unexpanded (map index -1, no state) before the scheduler expands it (map index 0)."""

    def __init__(self, listings):
        self.listings = list(listings)

    def run(self, dag_id, run_id):
        return {"state": "running", "start_date": ts(0), "queued_at": ts(0)}

    def tasks(self, dag_id, run_id):
        return self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]


def test_run_watch_follows_a_mapped_task_after_its_expansion():
    unexpanded = [{"task_id": "list_clusters", "map_index": -1, "state": "running", "operator": "x"},
                  {"task_id": "collect", "map_index": -1, "state": None, "operator": "x"}]
    expanded = [{"task_id": "list_clusters", "map_index": -1, "state": "success", "operator": "x",
                 "queued_when": ts(0), "start_date": ts(0), "end_date": ts(1)},
                {"task_id": "collect", "map_index": 0, "rendered_map_index": "lab", "state": "success",
                 "operator": "x", "queued_when": ts(1), "start_date": ts(1), "end_date": ts(3)}]
    out = io.StringIO()
    w = demo.RunWatch(demo.Clock(out=out), RecordedApi([unexpanded, expanded]), "fleet_maintenance", "r", "run 1")
    assert w.poll() is False and w.task("collect")["state"] is None
    assert w.poll() is False
    assert w.task("collect")["state"] == "success"  # the stale unexpanded entry is gone
    demo.watch([w], 5, until=lambda: (w.task("collect") or {}).get("state") in demo.TERMINAL, interval=0)
    assert "run 1: collect[lab] success: queued 0.0s, ran 2.0s" in out.getvalue()


@pytest.mark.parametrize("gap", [62 + 15, 100, 175, 400])
def test_final_window_keeps_both_collections_judged(gap):
    """The stuck rules judge only when the snapshots span half the window, and the first snapshot
    must be inside the window: for a gap 15% short (collections spread over the clusters) up to 60%
    long (the final run starts late behind a scheduled run), both hold."""
    from fleetkit.stuck import rules

    window = demo.final_window(gap)
    assert window >= 120
    for actual in (gap * 0.85, gap, gap * 1.25, gap * 1.6):
        if actual >= 60:  # the demo holds the final run at least GAP_SECONDS after the first collection
            assert actual <= window  # the first collection is inside the window
            assert not rules.insufficient(rules_features(actual), window)


def rules_features(span: float):
    from fleetkit.stuck import rules

    fields = {f: None for f in rules.Features.__dataclass_fields__}
    fields.update(snapshots=2, span_seconds=span)
    return rules.Features(**fields)


@pytest.mark.parametrize("stamp, revision, expected", [
    ('{"airflow": "3.3.2", "revision": "abc123"}', "abc123", False),  # migrated by this version: skip
    (None, "abc123", True),                                            # never stamped
    ('{"airflow": "3.3.2", "revision": "abc123"}', None, True),       # fresh or dropped database
    ('{"airflow": "3.3.2", "revision": "abc123"}', "fff000", True),   # the database moved since
    ('{"airflow": "3.3.1", "revision": "abc123"}', "abc123", True),   # another Airflow installed
    ('{"airflow": "3.3.2", "rev', "abc123", True),                     # a torn stamp
])
def test_airflow_db_migrate_is_skipped_only_when_stamped_for_this_database_and_version(stamp, revision, expected):
    from fleetlab.airflow_services import migrate_needed

    assert migrate_needed(stamp, revision, "3.3.2") is expected


def test_a_run_an_earlier_demo_left_running_is_not_the_first_collection():
    """A demo stopped mid-run leaves its run 'running' in Airflow: the next demo took it as its
    first collection (hours old), and chose a window of hours from it."""
    started = T0
    old = {"dag_run_id": "scheduled__old", "run_after": "2026-01-01T00:00:00Z", "state": "running"}
    due = {"dag_run_id": "scheduled__now", "run_after": (T0 - dt.timedelta(seconds=20)).isoformat(), "state": "queued"}
    assert demo.left_over([old, due], started) == [old]
    assert demo.left_over([due], started) == []


def test_the_lab_airflow_runs_its_small_spark_jobs_with_the_quick_jit(tmp_path, monkeypatch):
    from fleetlab import airflow_services as services

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    env_file = services.ensure_env_file(labs=[])
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if not line.startswith("#"))
    assert values["SPARK_SUBMIT_OPTS"] == "'-XX:TieredStopAtLevel=1'"


def test_collections_go_on_at_the_demos_pace_until_the_final_run_starts(tmp_path, monkeypatch):
    import io

    log = tmp_path / "calls"
    script = tmp_path / "fleetctl"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    script.chmod(0o755)
    monkeypatch.setattr(demo, "fleetctl", lambda: str(script))
    t0 = time.monotonic()
    done = lambda: log.exists() and len(log.read_text().splitlines()) >= 3  # noqa: E731 - the final run started
    n = demo.collections_until(demo.Clock(out=io.StringIO()), done, every=0.1)
    calls = log.read_text().splitlines()
    assert n == 3 and calls == ["collect --cluster all"] * 3
    assert time.monotonic() - t0 >= 0.3  # one pace apart, the first one pace after the start


def test_a_left_over_run_the_api_server_will_not_mark_failed_is_still_never_used(monkeypatch):
    """The api-server answered 500 to the PATCH while its scheduler updated the same run: the demo
    says so and goes on without that run (it triggers its own)."""
    started = time.time()
    old = {"dag_run_id": "scheduled__old", "state": "running", "run_after": "2026-01-01T00:00:00+00:00"}
    calls = []

    class FakeAirflow:
        def active_runs(self, dag_id):
            return [old]

        def api(self, method, path, body=None):
            calls.append((method, path))
            raise RuntimeError("HTTP Error 500: Internal Server Error")

        def dag(self, dag_id):
            return {"next_dagrun_run_after": None}

        def trigger(self, dag_id, conf, run_after=None):
            calls.append(("trigger", dag_id))
            return {"dag_run_id": "manual__new"}

    monkeypatch.setattr(demo.time, "sleep", lambda s: None)
    out = io.StringIO()
    w = demo.first_collection(demo.Clock(started_at=started, out=out), FakeAirflow())
    assert w.run_id == "manual__new" and w.triggered
    assert [c for c in calls if c[0] == "PATCH"] == [("PATCH", "/api/v2/dags/fleet_maintenance/dagRuns/scheduled__old")] * 3
    assert "could not be marked failed" in out.getvalue()


def test_the_demo_summary_names_the_metrics_url_and_a_scrape_config(tmp_path, monkeypatch, capsys):
    import yaml

    from fleetlab import demo_summary
    from fleetlab import airflow_services as services

    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    demo_summary.main(stuck_run=None, runs=None)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("metrics "))
    url = f"http://{services.API_HOST}:{services.API_PORT}/fleet/metrics"
    assert url in line
    job = yaml.safe_load(line.split("scrape config: ", 1)[1].rsplit(" (docs/", 1)[0])[0]  # valid YAML, as printed
    assert job["metrics_path"] == "/fleet/metrics" and "credentials_file" in job["authorization"]
    assert job["static_configs"][0]["targets"] == [f"{services.API_HOST}:{services.API_PORT}"]
