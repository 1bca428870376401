"""Which answer a retried approval task takes (fleet_airflow.gate.PlanApprovalOperator): the scheduler
may fail an approval task that an answer resumed before it processed the executor event of the run
that parked it, and the task retries. The retry keeps the decision its earlier try audited (a keyed
audit record naming the request); else it defers to EarlierAnswerTrigger, which reads the answer
Airflow's HITL record holds for the earlier request, and decides from it or asks again. The live
race under the real scheduler (trigger, triggerer and all) is tests/ui/test_approval_server.py;
here the task instance is a stand-in with the two fields the operator reads (its id and try
number), and Airflow's HITL record a stand-in with the fields the trigger reads."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import yaml
from airflow.sdk.exceptions import DownstreamTasksSkipped

from fleetkit.core import plans
from fleetkit.core.fleet import load_fleet
from fleetkit.core.runbook import Runbook

from fleet_airflow.actions import RESET_OFFSETS
from fleet_airflow.gate import APPROVAL_RETRIES, APPROVAL_SETTLE, PlanApprovalOperator
from fleet_airflow.triggers.earlier_answer import EarlierAnswerTrigger, answer_event

APPROVERS = ["alice", "bob"]


@pytest.fixture
def rb(tmp_path, monkeypatch):
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({"clusters": [{"name": "c1", "kafka_conn_id": "k", "approvers": APPROVERS}]}))
    for k, v in (("FLEET_FILE", fleet_file), ("FLEET_DATA_ROOT", tmp_path / "data"),
                 ("FLEET_LOCK_DIR", tmp_path / "locks")):
        monkeypatch.setenv(k, str(v))
    rb = Runbook(capability="stuck", action="reset_offsets", dag_id="runbook_stuck_reset", run_id="r1",
                 cluster="c1")
    _, digest = plans.store(rb.plans_root, rb.dag_id, rb.run_id, {"cluster": "c1", "title": "t", "changes": [],
                                                                   "action": "reset_offsets", "preconditions": [],
                                                                   "rollback": {"how": "reset back", "conf": {}, "dag_id": "runbook_stuck_reset"}, "details": {"partitions": []},
                                                                   "created_at": "2026-11-29T00:59:00Z", "risks": [],
                                                                   "evidence": []})
    rb.digest = digest
    return rb


def first_try_asked(rb, ti_id="ti-try-1"):
    """The approval record as try 1 leaves it when Airflow failed it the moment an answer resumed it."""
    rb.write_approval({"dag_id": rb.dag_id, "run_id": rb.run_id, "digest": rb.digest, "requested_by": ["alice"],
                       "triggering_user": "alice", "ti_id": ti_id, "try_number": 1, "assigned": ["bob"],
                       "requested_at": "2026-11-29T00:59:58+00:00", "answer": None})


def first_try_answered(rb, choice="Approve", audited=True, answer_try=1):
    """The approval record and audit as try 1 leaves them when it was resumed with `choice` by bob,
    wrote the answer, audited the decision (or not), and was then failed by the scheduler."""
    answer = {"chosen_options": [choice], "approver": "bob", "responded_by_user": {"id": "bob", "name": "bob"},
              "responded_at": "2026-11-29T01:00:00+00:00", "timedout": False, "try_number": answer_try}
    if audited:
        answer["audited"] = True
        rb.audit("approved" if choice == "Approve" else "rejected", actor="bob", digest=rb.digest,
                 details={"request": "ti-try-1", "try_number": 1})
    rb.write_approval({"dag_id": rb.dag_id, "run_id": rb.run_id, "digest": rb.digest, "requested_by": ["alice"],
                       "triggering_user": "alice", "ti_id": "ti-try-1", "try_number": 1, "assigned": ["bob"],
                       "requested_at": "2026-11-29T00:59:58+00:00", "answer": answer})


def op():
    return PlanApprovalOperator(task_id="approve", action=RESET_OFFSETS)


def test_the_approval_task_is_the_one_that_retries():
    assert op().retries == APPROVAL_RETRIES >= 1


@pytest.mark.parametrize("choice", ["Approve", "Reject"])
def test_a_retry_takes_the_answer_its_earlier_try_recorded_and_audited(rb, choice):
    first_try_answered(rb, choice)
    request, event = op()._earlier_decision(rb, SimpleNamespace(id="ti-try-2", try_number=2))
    assert request["ti_id"] == "ti-try-1"
    assert event["chosen_options"] == [choice] and event["responded_by_user"]["name"] == "bob"
    assert event["responded_at"].isoformat() == "2026-11-29T01:00:00+00:00"


@pytest.mark.parametrize("same_id", [True, False])  # Airflow 3.3 keeps the id across tries, 3.1 does not
def test_a_retry_whose_earlier_try_asked_has_no_decision_to_keep(rb, same_id):
    """No decision was audited: the earlier request is found (so the retry reads Airflow's record of
    its answer, below), but there is nothing to keep."""
    first_try_asked(rb, ti_id="ti-1" if same_id else "ti-try-1")
    assert op()._earlier_decision(rb, SimpleNamespace(id="ti-1", try_number=2)) is None
    assert op()._earlier_request(rb, SimpleNamespace(id="ti-1", try_number=2))["try_number"] == 1


def hitl_detail(received=True, chosen=("Reject",), who="bob"):
    """Airflow's HITLDetailResponse as the triggerer reads it."""
    import datetime as dt
    return SimpleNamespace(response_received=received, chosen_options=list(chosen) if chosen else None,
                           params_input={}, responded_by_user=SimpleNamespace(id=who, name=who) if who else None,
                           responded_at=dt.datetime(2026, 11, 29, 1, 0, tzinfo=dt.timezone.utc) if received else None)


def test_the_trigger_fires_with_the_answer_airflow_holds_or_with_none():
    assert answer_event(hitl_detail()) == {
        "answered": True, "chosen_options": ["Reject"], "params_input": {},
        "responded_by_user": {"id": "bob", "name": "bob"}, "responded_at": "2026-11-29T01:00:00+00:00"}
    assert answer_event(hitl_detail(received=False, chosen=None))["answered"] is False
    assert answer_event(hitl_detail(chosen=()))["answered"] is False  # a response with no option chosen


def test_the_trigger_waits_then_reads_airflows_record(monkeypatch):
    """The trigger's run(): the settle time first, then one read; a record Airflow cannot find (a
    task instance never asked) fires as no answer, never as an error."""
    import asyncio

    import airflow.sdk.execution_time.hitl as sdk_hitl

    calls = []

    def read(ti_id):
        calls.append(str(ti_id))
        if str(ti_id).endswith("0"):
            raise RuntimeError("HITLDetail not found")
        return hitl_detail(chosen=("Approve",))
    monkeypatch.setattr(sdk_hitl, "get_hitl_detail_content_detail", read)

    async def first_event(trigger):
        async for event in trigger.run():
            return event.payload
    uuid1, uuid0 = "01a2255f-2264-71a9-9f89-96d742f4c1b1", "01a2255f-2264-71a9-9f89-96d742f4c1b0"
    assert asyncio.run(first_event(EarlierAnswerTrigger(uuid1, 0.01)))["chosen_options"] == ["Approve"]
    assert asyncio.run(first_event(EarlierAnswerTrigger(uuid0, 0.01)))["answered"] is False
    assert calls == [uuid1, uuid0]


def test_an_answer_the_audit_does_not_hold_is_asked_again(rb):
    """A record that claims an answer without the keyed audit record (a file in the data root,
    edited by hand, or a try that died before auditing) is never taken as a decision: the retry
    reads Airflow's own record of the answer instead (the test above)."""
    first_try_answered(rb, audited=False)
    assert op()._earlier_decision(rb, SimpleNamespace(id="ti-try-2", try_number=2)) is None
    assert op()._earlier_request(rb, SimpleNamespace(id="ti-try-2", try_number=2))["ti_id"] == "ti-try-1"


def test_an_audit_record_of_another_request_or_decision_does_not_count(rb):
    first_try_answered(rb, "Reject", audited=False)
    rb.audit("approved", actor="bob", digest=rb.digest, details={"request": "ti-try-1"})  # not the decision
    rb.audit("rejected", actor="bob", digest=rb.digest, details={"request": "ti-of-another-run"})
    assert op()._earlier_decision(rb, SimpleNamespace(id="ti-try-2", try_number=2)) is None


@pytest.mark.parametrize("ti", [
    SimpleNamespace(id="ti-try-1", try_number=1),  # the request is this try's own
    SimpleNamespace(id="ti-try-2", try_number=1),  # a first try has no earlier try
    SimpleNamespace(id="ti-try-0", try_number=1),
])
def test_only_an_earlier_try_of_the_same_task_counts(rb, ti):
    first_try_answered(rb)
    assert op()._earlier_decision(rb, ti) is None


def test_an_answer_given_to_another_try_than_its_request_does_not_count(rb):
    first_try_answered(rb, answer_try=3)
    assert op()._earlier_decision(rb, SimpleNamespace(id="ti-try-4", try_number=4)) is None


def test_a_record_of_another_run_does_not_count(rb):
    first_try_answered(rb)
    rec = rb.approval()
    rec["run_id"] = "another"
    rb.write_approval(rec)
    assert op()._earlier_decision(rb, SimpleNamespace(id="ti-try-2", try_number=2)) is None


def test_a_second_approval_reads_its_own_request(rb):
    first_try_answered(rb)
    second = PlanApprovalOperator(task_id="approve_second", action=RESET_OFFSETS, second=True)
    assert second._earlier_decision(rb, SimpleNamespace(id="ti-try-2", try_number=2)) is None  # no SECOND request


# -- the operator's own path: execute() on a retry, and the resume the trigger hands it -------------
class _TI:
    def __init__(self, ti_id="01a2255f-2264-71a9-9f89-96d742f4c1b2", try_number=1):
        self.id, self.try_number, self.xcom = ti_id, try_number, {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def _context(ti, op_):
    from unittest import mock

    from airflow.sdk import DAG
    import datetime as dt

    from airflow.providers.standard.operators.empty import EmptyOperator

    with DAG("runbook_stuck_reset", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)) as dag:
        dag.add_task(op_)
        op_ >> EmptyOperator(task_id="execute")
    return {"dag": dag, "params": {"cluster": "c1"}, "run_id": "r1", "ti": ti, "task_instance": ti, "task": op_,
            "dag_run": mock.Mock(conf={}, triggering_user_name="alice")}


def _run(method, *args):
    """Call an operator method the way the task runner does, up to the point it parks or defers: the
    write to the API server (upsert_hitl_detail) is the one stand-in (it needs a running supervisor)."""
    from unittest import mock

    asked = {}
    with mock.patch("airflow.providers.standard.operators.hitl.upsert_hitl_detail", lambda **kw: asked.update(kw)):
        try:
            return method(*args), asked
        except BaseException as e:  # noqa: BLE001 - parks (TaskAwaitingInput) or defers (TaskDeferred)
            if type(e).__name__ not in ("TaskAwaitingInput", "TaskDeferred"):
                raise
            return e, asked


def test_a_first_try_asks(rb):
    op_ = op()
    parked, asked = _run(op_.execute, _context(_TI(), op_))
    assert type(parked).__name__ in ("TaskAwaitingInput", "TaskDeferred") and asked["assigned_users"] == [
        {"id": "bob", "name": "bob"}]
    assert rb.approval()["try_number"] == 1 and not asked["subject"].startswith("asked again")


def test_a_retry_after_an_unfinished_try_defers_to_the_trigger_and_asks_nobody(rb):
    first_try_asked(rb, ti_id="01a2255f-2264-71a9-9f89-96d742f4c1b2")
    op_ = op()
    deferred, asked = _run(op_.execute, _context(_TI(try_number=2), op_))
    assert type(deferred).__name__ == "TaskDeferred" and asked == {}
    assert isinstance(deferred.trigger, EarlierAnswerTrigger) and deferred.method_name == "resume_with_earlier_answer"
    assert deferred.trigger.ti_id == "01a2255f-2264-71a9-9f89-96d742f4c1b2"
    assert deferred.trigger.settle_seconds == APPROVAL_SETTLE.total_seconds()
    assert rb.approval()["try_number"] == 1  # the earlier request stays: the answer belongs to it


def test_the_retry_decides_from_the_answer_airflow_held_and_audits_it_once(rb):
    from unittest import mock

    first_try_asked(rb)
    op_ = op()
    ctx = _context(_TI(try_number=2), op_)
    event = answer_event(hitl_detail(chosen=("Reject",)))
    # Reject skips what follows: Airflow's skip() ends the task with DownstreamTasksSkipped, which
    # must reach the task runner as it is (never turned into a failure)
    skipped = DownstreamTasksSkipped(tasks=["execute"])
    with mock.patch.object(op_, "skip", side_effect=skipped) as skip, pytest.raises(DownstreamTasksSkipped):
        _run(op_.resume_with_earlier_answer, ctx, event)
    assert [t.task_id for t in skip.call_args.kwargs["tasks"]] == ["execute"]
    answer = rb.approval()["answer"]
    assert answer["approver"] == "bob" and answer["try_number"] == 1 and answer["taken_by_try"] == 2
    decisions = [(r["event"], r["actor"], r["details"]) for r in rb.history() if r["event"] in ("approved", "rejected")]
    assert decisions == [("rejected", "bob", {"request": "ti-try-1", "try_number": 1})]
    # a further try (the resumed one died too) keeps that decision: nothing asked, nothing audited again
    op2 = op()
    with mock.patch.object(op2, "skip", side_effect=skipped), pytest.raises(DownstreamTasksSkipped):
        _run(op2.execute, _context(_TI(try_number=3), op2))
    assert len([r for r in rb.history() if r["event"] in ("approved", "rejected")]) == 1


def test_an_approval_airflow_held_passes_the_same_checks_as_any_answer(rb):
    """The approver who requested the run (alice triggered it) answered the earlier request: the
    retry refuses it as execute_complete would, and records no approval."""
    from fleet_airflow.gate import AirflowFailException

    first_try_asked(rb)
    op_ = op()
    with pytest.raises(AirflowFailException, match="REFUSED"):
        _run(op_.resume_with_earlier_answer, _context(_TI(try_number=2), op_),
             answer_event(hitl_detail(chosen=("Approve",), who="alice")))
    assert not [r for r in rb.history() if r["event"] == "approved"]


def test_with_no_answer_held_the_retry_asks_again_and_says_so(rb):
    first_try_asked(rb)
    op_ = op()
    parked, asked = _run(op_.resume_with_earlier_answer, _context(_TI(try_number=2), op_),
                         {"answered": False, "why": "Airflow's HITL record holds no answer"})
    assert type(parked).__name__ in ("TaskAwaitingInput", "TaskDeferred")
    assert asked["subject"].startswith("asked again") and rb.approval()["try_number"] == 2


def test_a_run_cleared_and_planned_again_is_asked_about_the_new_plan(rb):
    """The earlier try's decision was about another plan (the run was cleared, its plan task made a
    new one): neither that decision nor an answer Airflow holds counts; the new plan is asked about."""
    first_try_answered(rb, "Approve")
    plans.store(rb.plans_root, rb.dag_id, rb.run_id, {**plans.load(rb.plans_root, rb.dag_id, rb.run_id)[0],
                                                      "title": "t2", "created_at": "2026-11-29T02:00:00Z"})
    ti = SimpleNamespace(id="ti-try-2", try_number=2)
    assert op()._earlier_request(rb, ti) is None and op()._earlier_decision(rb, ti) is None
    op_ = op()
    parked, asked = _run(op_.execute, _context(_TI(try_number=2), op_))
    assert type(parked).__name__ in ("TaskAwaitingInput", "TaskDeferred") and asked["subject"].endswith("t2")
    assert rb.approval()["try_number"] == 2 and rb.approval()["answer"] is None


# -- the approval notice: once per wait ---------------------------------------------------------------
def _notice_context(task_id="approve"):
    return {"dag": SimpleNamespace(dag_id="runbook_stuck_reset"), "run_id": "manual__2026-11-29T01:00:00+00:00",
            "ti": SimpleNamespace(id="ti-try-2", try_number=2, task_id=task_id)}


def _with_alerts(monkeypatch, alerts: dict):
    path = os.environ["FLEET_FILE"]
    with open(path) as f:
        doc = yaml.safe_load(f)
    doc["alerts"] = alerts
    with open(path, "w") as f:
        f.write(yaml.safe_dump(doc))
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example/")


def test_the_approvers_are_told_once_per_wait(rb, monkeypatch):
    _with_alerts(monkeypatch, {"slack_webhook_conn_id": "fleet_slack"})
    cluster = load_fleet(os.environ["FLEET_FILE"]).cluster("c1")
    plan = {"title": "Reset offsets of group 'g'"}
    request = {"ti_id": "ti-try-1", "try_number": 1}
    notice = op()._notice(_notice_context(), cluster, plan, rb.digest, ["bob"], ("alice",), None, request)
    assert notice.channels() == ("slack",) and request["notice"]["channels"] == ["slack"]
    assert notice.link == ("https://airflow.example/dags/runbook_stuck_reset/runs/"
                           "manual__2026-11-29T01%3A00%3A00%2B00%3A00/tasks/approve/required_actions")
    assert notice.title == "approval waiting: reset_offsets on cluster c1: Reset offsets of group 'g'"
    assert notice.key == "kafka-fleet/approval/runbook_stuck_reset/manual__2026-11-29T01:00:00+00:00/approve"
    assert notice.approval and not notice.fail_on_error
    # a retry asking again about the same plan: its earlier request was told, nobody is told again
    again = {"ti_id": "ti-try-2", "try_number": 2}
    earlier = dict(request)
    assert op()._notice(_notice_context(), cluster, plan, rb.digest, ["bob"], ("alice",), earlier, again) is None
    assert again["notice"] == request["notice"]
    # an earlier request nobody was told about (a notice could not be built then): told now, "asked again"
    notice = op()._notice(_notice_context(), cluster, plan, rb.digest, ["bob"], ("alice",), {"try_number": 1}, {})
    assert notice.lines[0].startswith("Asked again")


def test_a_notice_that_cannot_be_built_or_sent_never_fails_the_gate(rb, monkeypatch):
    from fleet_airflow import gate

    cluster = load_fleet(os.environ["FLEET_FILE"]).cluster("c1")
    _with_alerts(monkeypatch, {"slack_webhook_conn_id": "not a conn id"})  # the fleet file refuses it
    request = {}
    assert op()._notice(_notice_context(), cluster, {"title": "t"}, rb.digest, ["bob"], (), None, request) is None
    assert "notice" not in request

    def boom(self, context):
        raise RuntimeError("the channel blew up")

    monkeypatch.setattr(gate.FleetAlertNotifier, "notify", boom)
    gate.ApprovalNotice(title="t", lines=[], approval=True).notify({})  # logged, not raised
