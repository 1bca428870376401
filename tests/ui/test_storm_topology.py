"""A real Storm topology stuck on a poison record, judged and fixed from ZooKeeper under the real
scheduler.

The lab's Storm 1.2.4 LocalCluster (fleetlab.storm, started for this module only) runs
storm-kafka's KafkaSpout on a topic of the 0.9 test cluster; its bolt fails the poison record
every time, so the spout replays it and its committed offset (the partition's JSON znode, where
storm-kafka's PartitionManager writes it) stops there. Storm's own state lives in the same
ZooKeeper (/storm), and the fleet file declares the spouts' store for that cluster.

While the topology runs, fleet_maintenance judges the spout's partition STALLED (Storm shows the
topology assigned to a registered supervisor) and the fleet page lists it; once it is killed (as
`storm kill` does: Nimbus removes its StormBase and assignment) the collection reads it not running
and the stuck job judges it STOPPED; the reset runbook's
"skip 1", planned and re-checked from Storm's znodes (no `topology_deactivated` given), approved
by the other approver, moves the spout past the record; started again, the topology consumes past
it until the lag drains."""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import threading
import time
import urllib.parse
from contextlib import contextmanager
from pathlib import Path

import pytest

from fleetkit.collection import storm_state
from fleetkit.core import audit, plans
from fleetkit.core.datasets import DataRoot, read_dataset
from fleetlab.storm import StormTopology
from fleetlab.traffic import produce, wait_topic
from tests.helpers import wait_until
from tests.ui.approvals import (answer, fail_runs_in_progress, finished, pending_approval, settle, task_states, trigger,
                                unpause, wait_for)

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]

POISON_AT = 10   # records 0-9 and 11-19 are processed; the one at offset 10 never is
RECORDS = 20
SPOUT_ROOT = "/fleetlab-spouts"
STORM_ROOT = "/storm"


@pytest.fixture(scope="module")
def storm(lab, airflow_server):
    """The topology on a fresh topic of the 0.9 test cluster (records on partition 0, the poison one
    at offset 10), the spouts' store declared in the deployment's fleet file; stopped, with what it
    left in ZooKeeper and the fleet file's change, after the module."""
    import uuid

    import yaml

    spec = lab.spec
    suffix = uuid.uuid4().hex[:6]
    topic, spout = f"storm-poison-{suffix}", f"poison-spout-{suffix}"
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: POISON_AT}, value=b"ok")
    produce(lab.bootstrap, topic, {0: 1}, value=b"poison")
    produce(lab.bootstrap, topic, {0: RECORDS - POISON_AT - 1}, value=b"ok")
    topology = StormTopology(spec, topic, spout_root=SPOUT_ROOT, spout_id=spout, name=f"poison-{suffix}",
                             poison="poison")
    deployment = lab.fleet_file
    before = deployment.read_text()
    doc = yaml.safe_load(before)
    for entry in doc["clusters"]:
        if entry["name"] == spec.name:
            entry["offset_stores"] = [{"kind": "storm", "conn_id": spec.zk_conn_id, "root": SPOUT_ROOT,
                                       "storm_root": STORM_ROOT}]
    deployment.write_text(yaml.safe_dump(doc, sort_keys=False))
    zk = spec.zk_client(chroot="")
    try:
        yield {"topology": topology, "topic": topic, "spout": spout, "zk": zk, "lab": lab,
               "znode": f"{SPOUT_ROOT}/{spout}/partition_0"}
    finally:
        print("storm topology:", topology.stop())
        deployment.write_text(before)
        for path in (STORM_ROOT, SPOUT_ROOT):
            zk.delete(path, recursive=True)
        zk.stop()
        zk.close()


def spout_state(case) -> dict:
    try:
        return json.loads(case["zk"].get(case["znode"])[0])
    except Exception:  # noqa: BLE001 - not written yet
        return {}


def liveness(case, topology_id: str) -> str:
    return storm_state.topology_liveness(case["zk"], STORM_ROOT, topology_id).state


def collect(case, times: int, gap: float) -> list:
    """`times` collections `gap` seconds apart (their CollectionResults), none with a Storm problem."""
    from fleet_airflow import clusters, settings

    results = []
    for i in range(times):
        if i:
            time.sleep(gap)
        results.append(clusters.collect(case["lab"].cluster, settings.data_root()))
        assert not [p for p in results[-1].problems if "storm" in p], results[-1].problems
    return results


@contextmanager
def collecting(case, every: float):
    """Collect the cluster every `every` seconds in a thread while the block runs."""
    stop, failures = threading.Event(), []

    def loop():
        while not stop.is_set():
            try:
                collect(case, 1, 0)
            except Exception as e:  # noqa: BLE001 - reported after the block
                failures.append(e)
            stop.wait(every)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)
    assert not failures, failures


def test_a_poisoned_storm_spout_is_stalled_then_stopped_then_skipped_and_drains(storm, airflow_server):
    from fleet_airflow import settings
    from fleetkit.core.settings import run_folder
    from fleetkit.stuck import inprocess
    from tests.ui.test_fleet_page import get

    case = storm
    spec, spout = case["lab"].spec, case["spout"]
    root = settings.data_root()

    # -- the topology runs and its spout commits up to the poison record, never past it -----------
    case["topology"].start()
    wait_until(lambda: spout_state(case).get("offset") == POISON_AT, 240,
               f"the spout's offset at the poison record ({case['znode']})", interval=2)
    first = spout_state(case)["topology"]["id"]
    assert liveness(case, first) == storm_state.RUNNING
    time.sleep(5)
    assert spout_state(case)["offset"] == POISON_AT  # replayed, failed, not committed past

    # -- fleet_maintenance: STALLED (a live topology, the offset frozen with lag), on the fleet page.
    # Collections every 4 s from before the run until it analyses give its window snapshots however
    # late the scheduler starts it; the scheduled run its unpausing queues is failed, so this one runs
    fm = {"api": airflow_server.api, "dag_id": "fleet_maintenance", "airflow": airflow_server,
          "conf": {"window": "60s", "offsets_health": "never"}}
    try:
        with collecting(case, every=4.0):
            time.sleep(35)
            unpause(fm)
            run_id = trigger(fm, user="admin")
            wait_for(lambda: fail_runs_in_progress(fm["api"], "fleet_maintenance", keep=run_id), 120,
                     "no other fleet_maintenance run ahead of this one")
            wait_for(lambda: task_states(fm, run_id).get("analyse_stuck") not in (None, "scheduled", "queued"),
                     420, "the run's stuck analysis")
        state = wait_for(lambda: finished(fm, run_id), 420, "the fleet_maintenance run to finish")
    finally:  # no scheduled run after this one replaces reports/stuck/latest while the page is read
        fm["api"]("PATCH", "/api/v2/dags/fleet_maintenance", {"is_paused": True})
    assert state == "success", task_states(fm, run_id)
    out = run_folder(Path(root) / "reports", "stuck", run_id)
    findings = [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines()]
    (found,) = [f for f in findings if f["group"] == spout and f["source"] == "storm"]
    assert (found["partition"], found["status"], found["committed_offset"]) == (0, "STALLED", POISON_AT), found
    code, body = get("/fleet/?" + urllib.parse.urlencode({"cluster": spec.name, "status": "STALLED", "q": spout}),
                     token=airflow_server.api_token())
    assert code == 200 and html.escape(spout, quote=False) in body

    # -- killed: Storm's znodes show it not running, the stuck job says STOPPED ------------------------
    print("storm topology:", case["topology"].stop())
    wait_until(lambda: liveness(case, first) == storm_state.NOT_RUNNING, 90,
               "the killed topology gone from Storm's znodes", interval=2)
    # judged by the stuck job's stages in this process, as of the newest of four collections, over a
    # window that holds them (about 5 s apart: twice the interval a partition without rhythm needs)
    snaps = collect(case, 4, 4.0)
    window = (snaps[-1].observed_at - snaps[0].observed_at) + dt.timedelta(seconds=2)
    snapshots = read_dataset(DataRoot(root), "offsets_snapshots")
    judged, _, _ = inprocess.evaluate(snapshots, window, snaps[-1].observed_at)
    (row,) = [r for r in judged.to_pylist() if r["group"] == spout and r["source"] == "storm"]
    assert row["status"] == "STOPPED", row

    # -- the skip, planned from Storm's znodes (no confirmation), approved by the other approver ----
    reset = {"api": airflow_server.api, "dag_id": "runbook_stuck_reset", "airflow": airflow_server,
             "conf": {"cluster": spec.name, "source": "storm", "group": spout, "topic": case["topic"],
                      "partitions": "0", "target": "skip 1", "dry_run": False}}
    unpause(reset)
    run_id = trigger(reset, user="admin")
    wait_for(lambda: pending_approval(reset, run_id), 180, "the approval request")
    settle(reset, run_id)
    answer(reset, run_id, "Approve", "approver")
    assert wait_for(lambda: finished(reset, run_id), 240, "the skip to finish") == "success", \
        task_states(reset, run_id)
    assert spout_state(case)["offset"] == POISON_AT + 1
    plan, _ = plans.load(Path(os.environ["FLEET_DATA_ROOT"]) / "plans", "runbook_stuck_reset", run_id)
    assert [p["check"] for p in plan["preconditions"]][0] == "topology_not_running"
    assert plan["details"]["liveness_from"] == "storm" and plan["details"]["topologies"][first]["state"] == \
        storm_state.NOT_RUNNING
    events = [(r["event"], r["actor"]) for r in audit.records(DataRoot(os.environ["FLEET_DATA_ROOT"]), spec.name,
                                                              run_id)]
    assert events == [("planned", "admin"), ("approved", "approver"), ("executed", "approver"), ("verified", None)]

    # -- started again: the spout resumes past the poison record and the lag drains ----------------
    case["topology"].start()
    wait_until(lambda: spout_state(case).get("offset") == RECORDS, 240, "the spout's offset at the log end",
               interval=2)
    assert spout_state(case)["topology"]["id"] != first
