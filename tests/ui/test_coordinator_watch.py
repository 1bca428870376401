"""The leader-change watch under a real Airflow (api-server, scheduler, dag-processor, triggerer):
stopping the broker that leads a __consumer_offsets partition makes the trigger in the triggerer
emit an asset event, the scheduler starts ownership (nothing here creates the run),
and its report shows the epoch change, the groups on that partition and their recovery."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest

from fleetkit.clients import leadership
from fleetkit.core.settings import run_folder

from tests.ui.approvals import wait_for
from tests.helpers import admin_kafka, live_groups_on_partition

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "ownership"
OFFSETS = "__consumer_offsets"
pytestmark = [pytest.mark.airflow, pytest.mark.lab, pytest.mark.spark]


def _balance(lab) -> None:
    with lab.zookeeper() as zk:
        leadership.elect_preferred_leaders(zk, OFFSETS)



def _ts(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def watching(airflow_server):
    """ownership unpaused for this test only: left on, every leader change the later
    tests make (trims, broker restarts, reassignments) would start a Spark run in the background of
    theirs."""
    api = airflow_server.api
    dag = wait_for(lambda: api("GET", f"/api/v2/dags/{DAG_ID}"), 180, "the DAG parsed by the dag-processor")
    # Airflow runs the asset watchers of unpaused DAGs only, from the DAG's next parse: asked for
    # here (the tests' dag-processor parses a file only once an hour unless asked)
    log = Path(airflow_server.airflow_home()) / "logs" / "triggerer.out"
    since = log.stat().st_size if log.exists() else 0  # what the triggerer logs from here on counts
    api("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    api("PUT", f"/api/v2/parseDagFile/{dag['file_token']}")
    yield api, log, since
    api("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": True})
    api("PUT", f"/api/v2/parseDagFile/{dag['file_token']}")  # and its watchers stop


def test_stopping_a_partition_leader_starts_the_ownership_check(lab, airflow_server, watching, unique):
    api, triggerer_log, since = watching

    def new_log() -> str:
        with open(triggerer_log, "rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")

    wait_for(lambda: "watching 50 __consumer_offsets partition states of cluster labtest" in new_log(), 180,
             "the leader-change trigger running in the triggerer")
    time.sleep(3)

    _balance(lab)
    balanced_at = time.time()

    def settled():
        # the watch reports the balancing moves too (sometimes seconds later), and a run in progress
        # holds back the next one (one active run): the broker is stopped once those runs are over
        runs = api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]
        last = max([balanced_at] + [_ts(r["queued_at"]) for r in runs if r.get("queued_at")])
        busy = any(r["state"] in ("queued", "running") for r in runs)
        return not busy and time.time() - last >= 10

    wait_for(settled, 420, "no ownership run in progress or queued for 10 s after the leaders were balanced")
    with lab.zookeeper() as zk:
        states, _ = zk.partition_states([OFFSETS])
    leaders = {s.partition: s for s in states}
    p = 5
    victim = leaders[p].leader
    groups, members = live_groups_on_partition(lab, p, 3, "watch 'ü😀' $(x) #{i} " + unique("g"), unique("watch"),
                                               "watch")
    wait_for(lambda: all(d.state == "Stable" for d in _describe(lab, groups).values()), 90, "the groups Stable")
    before = {r["dag_run_id"] for r in api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]}

    t0 = time.time()
    lab.lab.stop_broker(victim)
    try:
        def new_run():
            runs = api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]
            # runs queued after the stop (the leader balancing before it starts runs of its own)
            fresh = [r for r in runs if r["dag_run_id"] not in before and _ts(r["queued_at"]) >= t0 - 0.5]
            return min(fresh, key=lambda r: r["queued_at"]) if fresh else None

        run = wait_for(new_run, 60, "a ownership run started by the watch")
        started = _ts(run["queued_at"] or run["start_date"])
        print(f"the check was queued {started - t0:.1f}s after broker {victim} (leader of partition {p}) stopped")
        assert run["run_type"] == "asset_triggered", run
        assert started - t0 < 15

        done = wait_for(lambda: (lambda r: r if r["state"] in ("success", "failed") else None)(
            api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}")), 600, "the check run finished")
        assert done["state"] == "success", done
    finally:
        for m in members:
            m.stop()
        lab.lab.start_broker(victim)
        _balance(lab)

    out = run_folder(Path(lab_data_root()) / "reports", "coordinator", run["dag_run_id"])
    parts = {r["partition"]: r for r in map(json.loads, (out / "partitions.jsonl").read_text().splitlines())
             if r["cluster"] == "labtest"}
    changed = parts[p]
    last = changed["changes"][-1]
    assert last["from_leader"] == victim and last["to_leader"] != victim and last["to_epoch"] > last["from_epoch"]
    assert changed["verdict"] == "OK" and changed["leader"] == last["to_leader"]
    assert changed["recovered_at"] is not None and changed["groups"] >= 3
    rows = {r["group"]: r for r in map(json.loads, (out / "groups.jsonl").read_text().splitlines())}
    for g in groups:
        assert rows[g]["partition"] == p and rows[g]["verdict"] == "OK"
        assert rows[g]["expected_coordinator"] == rows[g]["coordinator_id"] == last["to_leader"]
    report = (out / "report.md").read_text()
    # the run names the event that started it. Stopping a broker changes every partition it led
    # or followed at once (leader moves, ISR-only shrinks); under load the watch may start a run
    # on any of them first, so the event is checked for its cluster here and partition p's move
    # in partitions.jsonl above
    assert "Started by the leader-change watch" in report and "- cluster labtest at " in report, report


def _describe(lab, groups):
    k = admin_kafka(lab.spec)
    try:
        return k.describe_groups(groups)
    finally:
        k.close()


def lab_data_root() -> str:
    import os

    return os.environ["FLEET_DATA_ROOT"]
