"""A hostile consumer-group name through fleet_maintenance under the real scheduler.

A live group named with template syntax (``{{ 7*7 }}``), quotes, shell metacharacters, ``..``
and ``/``, a newline, bidi and zero-width characters and a 4-byte character is stuck (its
committed offset frozen behind produced records while its member is assigned: STALLED). The run
must succeed and the report_stuck task log and alert must show the name itself: ``{{ 7*7 }}``
literally (never ``49``), the newline and the invisible characters as visible escapes, so no log
line can be forged.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.parse
from pathlib import Path

import pytest

from fleetkit.core.render import visible_controls
from fleetkit.core.settings import run_folder
from tests.ui.approvals import task_log
from tests.ui.conftest import stuck_member
from tests.helpers import wait_until

DAG_ID = "fleet_maintenance"
# the run waits for the scheduler and a local Spark job: on a busy machine that alone takes minutes
pytestmark = [pytest.mark.airflow, pytest.mark.lab, pytest.mark.spark, pytest.mark.timeout(1800)]

# the template part Airflow's Jinja would evaluate; a repr() of the whole name is logged, so the
# name holds no backslash and no single quote (both would be escaped by repr, not by the toolkit)
HOSTILE = '{{ 7*7 }}-hostile "q" $(id);|& ../x/ \U0001F600 \u202egnp.exe\u200b\nFORGED LINE {% if 1 %}'


def q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def test_a_hostile_group_name_is_shown_not_evaluated(lab, airflow_server, unique):
    from fleet_airflow import clusters

    api = airflow_server.api
    topic = unique("hostile")
    group = f"{HOSTILE} {unique('g')}"
    member = stuck_member(lab, topic, group, "hostile-1")  # never gets past its record: committed 2, lag 3

    # the deployment's fleet file and data root (the servers were started with them; a run cannot
    # choose either): this test's data are told apart by its group name and its run id
    assert str(lab.fleet_file) == os.environ["FLEET_FILE"]
    data = Path(os.environ["FLEET_DATA_ROOT"])
    # snapshots every 5 s until the DAG's own collection is done, so the 30 s window before the
    # run's newest snapshot is covered whenever the scheduler gets to the run
    stop = threading.Event()
    problems: list[str] = []

    def collect_meanwhile():
        cluster = lab.cluster
        while not stop.is_set():
            try:
                clusters.collect(cluster, str(data))
            except Exception as e:  # noqa: BLE001 - reported by the test
                problems.append(repr(e))
            stop.wait(5)

    collector = threading.Thread(target=collect_meanwhile, daemon=True)
    run_id = None
    try:
        wait_until(lambda: member.assigned, 60, "the hostile group's member assigned")
        collector.start()
        wait_until(lambda: api("GET", f"/api/v2/dags/{DAG_ID}"), 180, "the DAG parsed by the dag-processor",
                   interval=1, retry_on=(urllib.error.HTTPError,))
        stop.wait(30)  # a window's worth of snapshots before the run's own
        conf = {"window": "30s", "offsets_health": "never"}
        run_id = api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]
        api("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
        # unpausing makes the scheduler start the latest scheduled run (max_active_runs=1): this
        # test's Airflow has no use for it, so it is failed rather than waited for
        for _ in range(10):
            for r in api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?state=queued&state=running")["dag_runs"]:
                if r["dag_run_id"] != run_id:
                    try:  # the scheduler may be updating the same row: tried again next second
                        api("PATCH", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(r['dag_run_id'])}", {"state": "failed"})
                    except urllib.error.HTTPError:
                        pass
            stop.wait(1)

        def collected():
            tis = api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/taskInstances")["task_instances"]
            states = {t["state"] for t in tis if t["task_id"] == "collect"}
            return states and states <= {"success", "failed", "upstream_failed"}

        wait_until(collected, 900, "the run's collection", interval=2, retry_on=(urllib.error.HTTPError,))
        stop.set()

        def finished():
            state = api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}")["state"]
            return state if state in ("success", "failed") else None

        state = wait_until(finished, 1200, "the run to finish", interval=2, retry_on=(urllib.error.HTTPError,))
    finally:
        stop.set()
        api("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": True})  # no scheduled runs behind this test
        member.stop()
        if collector.is_alive():
            collector.join(30)
    assert problems == []
    tis = {t["task_id"]: t["state"] for t in
           api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/taskInstances")["task_instances"]}
    assert state == "success", tis

    log = task_log(airflow_server, DAG_ID, run_id, "report_stuck")
    shown = visible_controls(group)
    assert "\\n" in shown and "\\u202e" in shown and "\\u200b" in shown and "{{ 7*7 }}" in shown
    assert f"STALLED labtest group '{shown}' {topic}-0" in log, log[-3000:]
    assert "ALERT " in log and "stuck partition(s)" in log, log[-3000:]
    assert log.count(f"group '{shown}'") >= 6  # 3 partitions: the operator's lines and the alert's
    # (every escaped hostile name taken out: a lab used before holds this test's groups of earlier runs)
    assert "49-hostile" not in log and "FORGED LINE" not in log.replace(visible_controls(HOSTILE), "")
    assert "\u202e" not in log and "\u200b" not in log
    for line in log.splitlines():
        assert not line.startswith("FORGED LINE"), line

    # the report files keep the name as data, escaped for their medium
    out = run_folder(data / "reports", "stuck", run_id)
    findings = [json.loads(x) for x in (out / "findings.jsonl").read_text().splitlines()]
    assert {f["status"] for f in findings if f["group"] == group} == {"STALLED"}
    html = (out / "report.html").read_text()
    assert "{{ 7*7 }}-hostile &#34;q&#34; $(id);|&amp; ../x/ \U0001F600 \\u202egnp.exe\\u200b\\nFORGED" in html
