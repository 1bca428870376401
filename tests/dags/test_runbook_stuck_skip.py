"""runbook_stuck_skip on the real lab: a consumer stuck on a poison record is diagnosed (the
record at its committed offset shown, never its value), and skipping the record through the
approval gate moves the group past it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetkit.core import audit
from fleetkit.core import plans
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import POISON, produce, producer, wait_topic

from tests.dags.test_runbook_stuck_reset import offsets, states
from tests.helpers import poisoned_consumer_collected
from fleetlab.hitl import Answerer

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "runbook_stuck_skip"
pytestmark = [pytest.mark.airflow, pytest.mark.lab]


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.get_dag(DAG_ID)


def test_diagnose_and_skip_the_poison_record(dag, lab, tmp_path, unique, monkeypatch):
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))  # a deployment setting, not a param
    topic, group = unique("poisoned"), unique("stuck-consumer")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 3, 1: 2, 2: 2})
    p = producer(lab.bootstrap)
    p.produce(topic, value=POISON, key=b"poison-key", partition=0)
    p.flush(10)
    produce(lab.bootstrap, topic, {0: 4})  # records behind the poison one

    data = tmp_path / "data"
    poisoned_consumer_collected(lab, topic, group, str(data), "stuck-1")
    assert offsets(lab, group, topic) == {0: 3, 1: 2, 2: 2}  # frozen at the poison record

    conf = {"cluster": "labtest", "group": group, "topic": topic, "partition": 0, "skip": 1, "window": "1m",
            "dry_run": False, "requested_by": "admin"}
    answer = Answerer(DAG_ID, "Approve")
    answer.start()
    dr = dag.test(run_conf=conf)
    answer.join(5)
    assert answer.error is None
    assert dr.state == "success", states(dr)
    assert offsets(lab, group, topic) == {0: 4, 1: 2, 2: 2}

    body = answer.body
    assert "**status**: STALLED" in body
    assert f"offset 3, no timestamp, key b'poison-key', {len(POISON)} bytes" in body.replace("\\", "")
    assert POISON.decode() not in body.replace("\\", "")  # never the value
    # `fleet` may not read data topics on 0.9 (with Read on groups it could commit): the runbook's
    # own principal read the record's metadata, and the page says so
    assert "(read as User:CN=fleet-runbook,O=fleetlab: the read-only principal may not read the topic)" in \
        body.replace("\\", "")
    assert "stuck\\-1@127\\.0\\.0\\.1" in body or "none \\(no live members\\)" in body
    plan, _ = plans.load(data / "plans", DAG_ID, dr.run_id)
    assert plan["details"]["diagnosis"]["record_at_committed_offset"]["offset"] == 3
    events = [r["event"] for r in audit.records(DataRoot(data), "labtest", dr.run_id)]
    assert events == ["planned", "approved", "executed", "verified"]
