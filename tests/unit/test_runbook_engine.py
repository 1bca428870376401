"""The runbook engine (fleetkit.core.runbook): one implementation of who may approve, the approval
record's eligibility, the lock, the journal and the audit, used by every path that changes a
cluster (the gate, the unattended group-id creator, fleetctl)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fleetkit.core import plans
from fleetkit.core.runbook import (APPROVE, SECOND, Refused, Runbook, answer_problem, needs_second_approver,
                                   run_state_problem)

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "a" * 64


def record(requested_by=(), first="alice", second=None, digest=DIGEST, second_choice=APPROVE, triggering_user=None):
    rec = {"digest": digest, "requested_by": list(requested_by), "triggering_user": triggering_user,
           "answer": {"chosen_options": [APPROVE], "approver": first}}
    if second is not None:
        rec[SECOND] = {"needed": True, "answer": {"chosen_options": [second_choice], "approver": second}}
    return rec


APPROVERS = ("alice", "bob", "carol")


@pytest.mark.parametrize("rec, problem", [
    # a person triggered it (Airflow recorded them): one approval by another listed approver is enough
    (record(requested_by=("carol",), triggering_user="carol"), None),
    # a name in the conf is not a person's request: it cannot waive the second approval
    (record(requested_by=("carol",)), "needs a second approver"),
    # nobody asked (an asset event, a scheduled DAG): a second, different, listed approver
    (record(), "needs a second approver"),
    (record(second="bob"), None),
    (record(second="alice"), "'alice' answered both approvals"),
    (record(second="mallory"), "second approver: 'mallory' is not an approver"),
    (record(second="bob", second_choice="Reject"), "the second approval task did not answer Approve"),
])
def test_a_run_no_person_requested_needs_two_approvers(rec, problem):
    got = answer_problem(rec, APPROVERS, (), "c1", "f.yaml", DIGEST)
    assert (got is None) if problem is None else (problem in got[0]), got
    # the first approval alone is judged without the second (the approval task's own check)
    assert answer_problem(rec, APPROVERS, (), "c1", "f.yaml", DIGEST, require_second=False) is None


def test_only_what_airflow_recorded_waives_the_second_approver():
    assert needs_second_approver(record()) is True
    assert needs_second_approver(record(), "dag_test") is False  # dag.test() records its runs as dag_test
    assert needs_second_approver(record(triggering_user="admin")) is False  # the approval task's copy
    # a conf's requested_by (any made-up name, e.g. rewritten in an XCom a child runbook reads) adds
    # someone who may not approve; it never stands in for a person's request
    assert needs_second_approver(record(requested_by=("admin",))) is True


@pytest.fixture
def deployment(tmp_path, monkeypatch):
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({"clusters": [{"name": "c1", "kafka_conn_id": "k",
                                                        "approvers": list(APPROVERS)}]}))
    for k, v in (("FLEET_FILE", fleet_file), ("FLEET_DATA_ROOT", tmp_path / "data"),
                 ("FLEET_LOCK_DIR", tmp_path / "locks")):
        monkeypatch.setenv(k, str(v))
    monkeypatch.delenv("FLEET_PLANS_DIR", raising=False)
    rb = Runbook(capability="stuck", action="reset_offsets", dag_id="runbook_stuck_reset", run_id="r1",
                 cluster="c1")
    _, digest = plans.store(rb.plans_root, rb.dag_id, rb.run_id, {"cluster": "c1", "title": "t", "changes": [],
                                                                   "action": "reset_offsets", "preconditions": [], "rollback": {}})
    return rb, digest


def test_the_engine_refuses_a_single_approval_of_a_run_no_person_requested(deployment):
    rb, digest = deployment
    rb.write_approval(record(digest=digest))
    rb.audit("approved", actor="alice", digest=digest)
    with pytest.raises(Refused, match="needs a second approver"):
        rb.approved(check_audit=True, final=False)
    rb.write_approval(record(digest=digest, second="bob"))
    with pytest.raises(Refused, match="no 'approved' record of run 'r1' by 'bob'"):  # the audit must agree
        rb.approved(check_audit=True, final=False)
    rb.audit("approved", actor="bob", digest=digest)
    assert rb.approved(check_audit=True)[1:] == (digest, "alice")
    with pytest.raises(Refused, match="'alice' answered both approvals"):  # final: the run ends here
        rb.write_approval(record(digest=digest, second="alice"))
        rb.approved(check_audit=True)
    rb.write_approval(record(digest=digest, second="bob"))
    with pytest.raises(Refused, match="a refusal is final"):
        rb.approved(check_audit=True)


def test_a_refusal_is_final_and_a_commands_own_refusal_is_not(deployment):
    rb, digest = deployment
    rb.write_approval(record(digest=digest, requested_by=("carol",), triggering_user="carol"))
    rb.audit("approved", actor="alice", digest=digest)
    with pytest.raises(Refused, match="never started"):
        raise rb.refuse("resume: its execute step never started", actor="dave", final=False)
    assert rb.approved(check_audit=True)[1:] == (digest, "alice")
    rb.audit("rejected", actor="bob", digest=digest)
    with pytest.raises(Refused, match="was rejected"):
        rb.approved(check_audit=True)


def test_rows_the_toolkit_did_not_sign_never_authorise(deployment):
    """With write access to the data root and no key: an approval file and `approved` rows with no
    hash (dated before the chain began, which verify counts rather than reports) or with a hash
    made without the key must not approve anything."""
    import datetime as dt

    from fleetkit.core import audit
    from fleetkit.core.datasets import write_collection

    rb, digest = deployment
    rb.write_approval(record(digest=digest, requested_by=("carol",), triggering_user="carol"))
    rb.audit("planned", actor="carol", digest=digest)  # a chain exists, signed with the key
    forged = {"cluster": "c1", "record_id": "f" * 32, "dag_id": rb.dag_id, "run_id": rb.run_id,
              "action": "reset_offsets", "event": "approved", "actor": "alice", "digest": digest, "message": "",
              "details": "{}"}
    before_chain = dict(forged, observed_at=dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc), key_id=None,
                        prev_hash=None, hash=None)
    write_collection(rb.root, "c1", before_chain["observed_at"], {"audit": [before_chain]})
    with pytest.raises(Refused, match="holds no 'approved' record of run 'r1' by 'alice'"):
        rb.approved(check_audit=True, final=False)
    unkeyed = dict(forged, record_id="e" * 32, observed_at=dt.datetime.now(dt.timezone.utc), key_id=None,
                   prev_hash=audit.GENESIS)
    unkeyed["hash"] = audit.record_hash(unkeyed)  # the plain hash, no key
    write_collection(rb.root, "c1", unkeyed["observed_at"], {"audit": [unkeyed]})
    with pytest.raises(Refused, match="holds no 'approved' record of run 'r1' by 'alice'"):
        rb.approved(check_audit=True, final=False)
    assert not {"f" * 32, "e" * 32} & {r["record_id"] for r in rb.history()}  # shown by records(), never trusted
    assert {"f" * 32, "e" * 32} <= {r["record_id"] for r in audit.records(rb.root, "c1")}
    rb.audit("approved", actor="alice", digest=digest)  # the real one
    assert rb.approved(check_audit=True)[1:] == (digest, "alice")


def test_a_run_airflow_does_not_know_is_never_acted_on():
    assert "Airflow has no such run" in run_state_problem("no such run", "trim resume", force=True)
    assert run_state_problem("no such run", "lock clear", force=True, unknown_run_ok=True) is None


def test_one_journal_folder_per_capability(tmp_path):
    """The gate's journal of the group-id runbook and the unattended creator's share one folder."""
    from fleetkit.group_ids.action import GROUP_ID_RECONCILE
    from fleetkit.group_ids.execute import journal_path
    from fleetkit.ownership.action import COORDINATOR_RECOVERY
    from fleetkit.stuck.action import RESET_OFFSETS, STUCK_SKIP
    from fleetkit.trim.action import TRIM_OFFSETS

    gate = Runbook(capability=GROUP_ID_RECONCILE.capability, action=GROUP_ID_RECONCILE.name, dag_id="d",
                   run_id="r", cluster="c1", data_root=str(tmp_path))
    unattended = Runbook(capability="group_ids", action="create_missing_group_ids", dag_id="d", run_id="r",
                         cluster="c1", data_root=str(tmp_path))
    assert gate.journal == unattended.journal == journal_path(str(tmp_path), "d", "r", "c1")
    assert gate.journal.relative_to(tmp_path).parts[:2] == ("journals", "group_ids")
    assert {a.capability for a in (RESET_OFFSETS, STUCK_SKIP, TRIM_OFFSETS, COORDINATOR_RECOVERY,
                                   GROUP_ID_RECONCILE)} == {"stuck", "trim", "ownership", "group_ids"}


def test_a_run_that_runs_is_never_acted_on():
    assert "still running" in run_state_problem("running", "x", force=True)
    assert "still queued" in run_state_problem("queued", "x", force=True)
    assert "--force" in run_state_problem(None, "x", force=False)
    assert run_state_problem(None, "x", force=True) is None
    assert run_state_problem("failed", "x", force=False) is None


def test_one_implementation_of_the_engine():
    """Approval eligibility, the approval record, the lock, the journal and the audit chain are
    defined once, in the library's core; the gate, the operators and fleetctl only call them."""
    defs = {"approver_problem": r"def approver_problem\(", "eligible_approvers": r"def eligible_approvers\(",
            "requesters": r"def requesters\(", "read_approval": r"def read_approval\(",
            "write_approval": r"def write_approval\(", "ClusterLock": r"class ClusterLock\b",
            "Journal": r"class Journal\b", "audit record": r"def record\(root: DataRoot",
            "the execute step's journal entry": r"intent\(GATE_SEQ", "the lock held for a change": r"def holding\(",
            "an approval's digest check": r"changed after approval"}
    where: dict[str, list[str]] = {k: [] for k in defs}
    for folder in ("include", "plugins", "fleetctl", "dags", "spark_jobs"):
        for path in (REPO / folder).rglob("*.py"):
            text = path.read_text()
            for name, pattern in defs.items():
                if re.search(pattern, text):
                    where[name].append(str(path.relative_to(REPO)))
    assert all(len(v) == 1 for v in where.values()), where
    assert all(v[0].startswith("include/fleetkit/core/") for v in where.values()), where


def test_a_stored_plan_whose_rollback_has_a_conf_names_the_dag_that_runs_it(tmp_path):
    """`fleetctl audit rollback` triggers the DAG the executed record names: a plan whose rollback
    carries a conf but no dag_id is refused when stored (the move_leader plans once lacked it)."""
    from fleetkit.ownership.plan import DAG_ID

    plan = {"action": "coordinator_recovery", "cluster": "c", "title": "t", "preconditions": [], "changes": [],
            "rollback": {"how": "again", "conf": {"cluster": "c", "action": "move_leader"}}}
    with pytest.raises(plans.PlanError, match="names no dag_id"):
        plans.store(tmp_path, "runbook_ownership", "run-1", plan)
    plan["rollback"]["dag_id"] = DAG_ID
    path, _ = plans.store(tmp_path, "runbook_ownership", "run-1", plan)
    assert path.exists()
    plan["rollback"] = {"how": "nothing to roll back", "conf": None}  # no conf: nothing to name
    plans.store(tmp_path, "runbook_ownership", "run-2", plan)


def test_the_execute_result_goes_to_a_file_beside_the_plan_whatever_the_cluster_said(tmp_path):
    """What execute read from the cluster reaches verify through a file, not the metadata database:
    a commit's metadata or a group name with a NUL (which PostgreSQL's JSONB refuses: a trim whose
    execute had finished failed on its XCom) and a result of every offset of a partition's groups."""
    result = {"before": {"g\x00roup": {"t|0": 5}}, "recommitted": [{"group": "g", "metadata": "m" * 255 + "\x00"}] * 30000}
    path = plans.store_result(tmp_path, "runbook_trim", "manual__2026-11-27T15:44:34+00:00", result)
    assert path.parent == plans.plan_path(tmp_path, "runbook_trim", "manual__2026-11-27T15:44:34+00:00").parent
    assert plans.load_result(tmp_path, "runbook_trim", "manual__2026-11-27T15:44:34+00:00") == result
    with pytest.raises(plans.PlanError, match="no stored execute result for DAG 'runbook_trim' run 'other'"):
        plans.load_result(tmp_path, "runbook_trim", "other")


def test_the_gate_hands_verify_the_stored_result_not_an_xcom():
    gate = (Path(__file__).resolve().parents[2] / "plugins" / "fleet_airflow" / "gate.py").read_text()
    assert "plans.store_result(" in gate and "plans.load_result(" in gate
    assert 'xcom_pull(task_ids="execute")' not in gate


def test_restoring_a_finished_trim_needs_another_persons_recent_approval(deployment, tmp_path):
    """A finished trim changed the cluster as approved; putting its files back is a change of its own:
    a listed approver other than who restores it approves it (signed in the audit), for 4 h."""
    import datetime as dt

    from fleetkit.core.errors import FleetError
    from fleetkit.core.runbook import GATE_SEQ
    from fleetkit.trim import resume as trim_resume
    from fleetkit.trim.plan import ACTION

    rb = Runbook(capability="trim", action=ACTION, dag_id="runbook_trim", run_id="t1", cluster="c1")
    _, digest = plans.store(rb.plans_root, rb.dag_id, rb.run_id, {"cluster": "c1", "title": "t", "changes": [],
                                                                   "action": ACTION, "preconditions": [], "rollback": {}})
    run = trim_resume.ApprovedRun(rb.dag_id, rb.run_id, plans.load(rb.plans_root, rb.dag_id, rb.run_id)[0], digest,
                                  "alice", rb.journal, rb)
    with rb.open_journal() as j:
        j.intent(GATE_SEQ, step="execute")
    assert trim_resume.restore_approval_problem(run, "carol") is None  # interrupted: its own approval covers it
    rb.audit("resumed", actor="carol", digest=digest)  # finished by fleetctl trim resume: finished all the same
    assert "needs its own approval" in trim_resume.restore_approval_problem(run, "carol")
    with rb.open_journal() as j:
        j.outcome(GATE_SEQ, "done")
    assert "needs its own approval" in trim_resume.restore_approval_problem(run, "carol")
    with pytest.raises(FleetError, match="not an approver"):
        trim_resume.approve_restore(run, "mallory")
    trim_resume.approve_restore(run, "bob")
    assert trim_resume.restore_approval_problem(run, "carol") is None
    assert "other than 'bob'" in trim_resume.restore_approval_problem(run, "bob")  # never one's own
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=trim_resume.RESTORE_APPROVAL_HOURS, minutes=1)
    assert "needs its own approval" in trim_resume.restore_approval_problem(run, "carol", now=later)


class _Kafka:
    """A cluster's id, as the lock asks it (a unit test reaches no cluster)."""

    def cluster_id(self) -> str:
        return "unit-cluster"


def test_execute_journals_around_the_change_and_audits_a_failure_with_the_journal(deployment):
    from fleetkit.core import audit
    from fleetkit.core.journal import read_journal
    from fleetkit.core.runbook import GATE_SEQ

    rb, digest = deployment
    assert rb.execute(lambda: {"changed": 1}, actor="bob", digest=digest) == {"changed": 1}
    assert read_journal(rb.journal)[GATE_SEQ]["status"] == "done"
    assert [r["event"] for r in audit.authentic_records(rb.root, "c1", rb.run_id)] == []  # success: the caller's

    failing = Runbook(capability="stuck", action="reset_offsets", dag_id=rb.dag_id, run_id="r2", cluster="c1")

    def change():
        with failing.open_journal() as j:  # one change made before the failure
            j.step(0, lambda: None, op="set")
        raise RuntimeError("broker went away")

    with pytest.raises(RuntimeError):
        failing.execute(change, actor="bob", digest=digest, rollback={"dag": "x"})
    entry = read_journal(failing.journal)[GATE_SEQ]
    assert (entry["status"], entry["error"]) == ("failed", "RuntimeError: broker went away")
    (failed,) = [r for r in audit.authentic_records(failing.root, "c1", "r2") if r["event"] == "failed"]
    assert "execute failed after 1 change(s) made" in failed["message"]
    assert failed["details"]["rollback"] == {"dag": "x"}


def test_holding_releases_the_lock_whatever_happens_and_guards_every_change(deployment):
    from fleetkit.core.locks import ClusterLocked, LockLost

    rb, _ = deployment
    cluster = rb.fleet_cluster()
    with pytest.raises(RuntimeError):
        with rb.holding(cluster, _Kafka(), None, "me", kind="cli") as lock:
            with pytest.raises(ClusterLocked):  # one holder
                rb.lock(cluster, _Kafka(), None, "someone else")
            raise RuntimeError("the change failed")
    assert lock.holder() is None  # released on the error
    with rb.holding(cluster, _Kafka(), None, "me", kind="cli") as lock:
        lock.release("me")  # cleared under it (an operator's `fleetctl lock clear`)
        with pytest.raises(LockLost), rb.open_journal() as j:
            j.step(0, lambda: None, op="set")  # the next change finds out before it is made


class _Action:
    """An action's callables, recording what the engine asked (a unit test reaches no cluster)."""

    name = "reset_offsets"

    def __init__(self, problems=(), verify=(), teardown=()):
        self.problems, self.verify_problems, self.teardown_done = list(problems), list(verify), list(teardown)
        self.executed = 0

    def check(self, ctx, plan):
        return self.problems

    def execute(self, ctx, plan):
        self.executed += 1
        return {"changed": 1}

    def verify(self, ctx, plan, result):
        return self.verify_problems

    def teardown(self, ctx, plan):
        return self.teardown_done


def _events(rb) -> list[str]:
    from fleetkit.core import audit

    return [r["event"] for r in audit.authentic_records(rb.root, "c1", rb.run_id)]


def _approved(rb, digest):
    rb.write_approval(record(digest=digest, second="bob"))
    rb.audit("approved", actor="alice", digest=digest)
    rb.audit("approved", actor="bob", digest=digest)


def test_the_steps_after_approval_run_in_order_and_each_is_audited(deployment):
    """execute (approval, lock identity, preconditions, change, `executed`), verify, clean up: the
    gate's tasks only call them."""
    from fleetkit.core.runbook import VerifyFailed

    rb, digest = deployment
    _approved(rb, digest)
    cluster = rb.fleet_cluster()
    lock = rb.lock(cluster, _Kafka(), None, "dag/r1")
    act = _Action(verify=["offset of g|t|0 is 7, the plan said 5"], teardown=["quarantine kept"])
    assert rb.execute_approved(act, lambda fn: fn(None), lock.identity, "dag/r1") == {"changed": 1}
    plans.store_result(rb.plans_root, rb.dag_id, rb.run_id, {"changed": 1})
    with pytest.raises(VerifyFailed, match="g|t|0 is 7"):
        rb.verify_executed(act, lambda fn: fn(None), {"changed": 1})
    assert rb.clean_up(act, lambda fn: fn(None)) == ["quarantine kept"]
    assert _events(rb)[-3:] == ["executed", "verify_failed", "teardown"] and act.executed == 1


def test_execute_refuses_without_the_lock_or_when_a_precondition_fails_and_changes_nothing(deployment):
    rb, digest = deployment
    _approved(rb, digest)
    act = _Action(problems=["group g is Stable now"])
    lock = rb.lock(rb.fleet_cluster(), _Kafka(), None, "dag/r1")
    with pytest.raises(Refused, match="preconditions no longer hold: group g is Stable now"):
        rb.execute_approved(act, lambda fn: fn(None), lock.identity, "dag/r1")
    with pytest.raises(Refused, match="a refusal is final"):  # and for good
        rb.execute_approved(_Action(), lambda fn: fn(None), lock.identity, "dag/r1")
    other = Runbook(capability="stuck", action="reset_offsets", dag_id=rb.dag_id, run_id="r3", cluster="c1")
    _, digest3 = plans.store(other.plans_root, other.dag_id, other.run_id, plans.load(rb.plans_root, rb.dag_id,
                                                                                      rb.run_id)[0])
    _approved(other, digest3)
    with pytest.raises(Refused, match="no lock identity"):
        other.execute_approved(act, lambda fn: fn(None), None, "dag/r3")
    assert act.executed == 0 and rb.execute_state() is None and other.execute_state() is None
    assert _events(rb).count("refused") == 2 and _events(other).count("refused") == 1


def test_clean_up_records_an_execute_that_never_finished(deployment):
    from fleetkit.core.runbook import GATE_SEQ

    rb, digest = deployment
    assert rb.clean_up(_Action(teardown=["x"]), lambda fn: fn(None)) == []  # execute never started
    with rb.open_journal() as j:
        j.intent(GATE_SEQ, step="execute", actor="alice")
    assert rb.clean_up(_Action(), lambda fn: fn(None)) == []
    assert _events(rb) == ["interrupted"]
