"""The destructive runbooks on the secured generations (Kafka 3.9 in ZooKeeper mode, 4.3 in KRaft
mode) under the real scheduler, approved in the browser by a second user, then rolled back with
`fleetctl audit rollback`: the offsets come back exactly. The 0.9 cluster's runs are in
test_approval_server.py.

On 3.9 and 4.3 the runbook's execute step resets through the Admin API
(AlterConsumerGroupOffsets, which Kafka allows only while the group is Empty), as the runbooks'
own principal `fleet-runbook` (the cluster's runbook connection), while plan and verify read as
`fleet`."""

from __future__ import annotations

import os

import pytest

from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import produce
from tests.conftest import GENERATIONS
from tests.helpers import commit_when_led, committed_offsets
from tests.ui.approvals import (answer, approve_in_browser, finished, pending_approval, settle, task_states,
                                trigger, unpause, wait_for)

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]
SECURED = ["3.9", "4.3"]


@pytest.fixture(params=SECURED, ids=[f"kafka-{g}" for g in SECURED])
def reset_case(request, lab_fleet, airflow_server, unique):
    handle = lab_fleet(GENERATIONS[request.param])
    spec = handle.spec
    topic, group = unique(f"gen-{spec.name}"), unique(f"gen-group ĝ {spec.name}")
    commit_when_led(handle.lab, topic, 3, {group: {0: 2, 1: 2, 2: 2}})  # as the lab's admin
    produce(handle.bootstrap, topic, {0: 10, 1: 10, 2: 10}, kafka_version=spec.kafka_version)
    conf = {"cluster": spec.name, "group": group, "topic": topic, "partitions": "0,1", "target": "offset 7",
            "dry_run": False}
    case = {"api": airflow_server.api, "dag_id": "runbook_reset_offsets", "conf": conf, "airflow": airflow_server,
            "root": DataRoot(os.environ["FLEET_DATA_ROOT"]), "handle": handle, "topic": topic, "group": group}
    unpause(case)
    return case


def offsets(case) -> dict[int, int]:
    h = case["handle"]
    return committed_offsets(h.bootstrap, case["group"], case["topic"], kafka_version=h.spec.kafka_version)


def test_reset_offsets_approved_in_the_browser_then_rolled_back(reset_case, monkeypatch, capsys):
    from fleetctl.cli import main
    from fleetlab.airflow_services import passwords

    case, cluster = reset_case, reset_case["conf"]["cluster"]
    run_id = trigger(case, user="admin")
    detail = wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    assert f"reset_offsets on cluster {cluster}" in detail["subject"]
    assert [u["name"] for u in detail["assigned_users"]] == ["approver"]  # not the requester
    assert offsets(case) == {0: 2, 1: 2, 2: 2}  # nothing before the approval
    settle(case, run_id)
    approve_in_browser(case, run_id, "approver", ["What will change", f"{case['topic']}-0", f"{case['topic']}-1"],
                       screenshot=f"approval-page-{cluster}.png")
    assert wait_for(lambda: finished(case, run_id), 240, "the run to finish") == "success", task_states(case, run_id)
    assert offsets(case) == {0: 7, 1: 7, 2: 2}
    recs = audit.records(case["root"], cluster, run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", None), ("approved", "approver"),
                                                       ("executed", "approver"), ("verified", None)]
    executed = recs[2]

    # the rollback: triggered by the CLI as the caller ("approver"), approved by the other approver
    monkeypatch.setenv("_AIRFLOW_PROCESS_CONTEXT", "server")  # what the CLI sets, undone after the test
    monkeypatch.setenv("FLEET_AIRFLOW_USER", "approver")
    monkeypatch.setenv("FLEET_AIRFLOW_PASSWORD", passwords()["approver"])
    capsys.readouterr()
    assert main(["audit", "rollback", executed["record_id"], "--execute"]) == 0
    out = capsys.readouterr().out
    rollback_id = out.split("triggered runbook_reset_offsets run ", 1)[1].split(" as ", 1)[0]
    detail = wait_for(lambda: pending_approval(case, rollback_id), 180, "the rollback's approval request")
    assert [u["name"] for u in detail["assigned_users"]] == ["admin"]
    settle(case, rollback_id)
    answer(case, rollback_id, "Approve", user="admin")
    assert wait_for(lambda: finished(case, rollback_id), 240, "the rollback to finish") == "success", \
        task_states(case, rollback_id)
    assert offsets(case) == {0: 2, 1: 2, 2: 2}  # exactly as before the first run
    events = [(r["event"], r["actor"]) for r in audit.records(case["root"], cluster, rollback_id)]
    assert events == [("planned", None), ("approved", "admin"), ("executed", "admin"), ("verified", None)]
