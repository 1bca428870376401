"""The approval gate: plan -> render -> approve -> execute -> verify -> audit, built once.

A runbook DAG gets it with ``approval_gate(action)``, where ``action`` is a ``GateAction``: how to
plan from the run's params, which preconditions to re-check, how to execute and how to verify.

* The plan is data, stored under the plans folder at a path derived from (DAG, run) and digested
  (SHA-256 over its canonical JSON). Nothing downstream trusts a value the plan task passes on.
* ``approve`` is Airflow's ApprovalOperator: subject names the action and the cluster, the body is
  the plan rendered to Markdown (every cluster-supplied name escaped), with its digest. The
  approvers are the fleet file's, the timeout (4 h by default) resolves to Reject.
* ``execute`` takes the decision and the approver from the ApprovalOperator's own XCom, reloads
  the stored plan, recomputes its digest, refuses if it differs from the approved one or if a
  precondition no longer holds (naming what changed), then acts.
* ``execute`` journals its start and end (fleetkit.core.journal, fsync) next to the action's own
  per-change journal; an exception leaves a ``failed`` audit record with the journal's account of
  what was changed. ``cleanup`` is a teardown: it runs whatever happened to ``execute`` (failed,
  killed, skipped) and first records ``interrupted`` when execute started but never finished, then
  runs the action's own teardown (the trim starts a broker it stopped), before ``unlock``.
* Every step lands in the audit dataset and in the task log. Dry run (the default) stops after
  the plan is rendered. One destructive runbook at a time per cluster (a lock held from just
  before execution until verification ends).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Callable

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.providers.standard.operators.hitl import ApprovalOperator

from fleetkit.core import audit
from fleetkit.core import journal as run_journal
from fleetkit.core.action import Action, ClusterContext
from fleetkit.core import plans
from fleetkit.core.datasets import DataRoot
from fleetkit.core.errors import FleetError
from fleetkit.core.fleet import Cluster, load_fleet
from fleetkit.core.locks import ClusterLock
from fleetkit.core.render import render, visible_controls

from fleet_airflow import settings

log = logging.getLogger(__name__)

DEFAULT_RESPONSE_TIMEOUT = dt.timedelta(hours=4)


# The action contract lives in the domain library; the gate only runs it.
GateAction = Action


def plans_root(params: dict) -> str:
    return settings.plans_root(params.get("data_root") or settings.data_root())


def lock_dir() -> str:
    return settings.lock_dir()


def _cluster(params: dict) -> Cluster:
    return load_fleet(params.get("fleet_file") or settings.fleet_file()).cluster(params["cluster"])


def _with_cluster(params: dict, fn: Callable[[ClusterContext], Any], journal_path=None) -> Any:
    from fleet_airflow import clusters

    cluster = _cluster(params)
    with clusters.connected(cluster) as (kafka, zk):
        return fn(ClusterContext(cluster, kafka, zk, journal_path=journal_path))


def execute_journal(params: dict, action: GateAction, context) -> str:
    """Where this run's execute journals its changes (derived from the run, never passed along)."""
    return str(run_journal.journal_path(params.get("data_root") or settings.data_root(), action.name,
                                        context["dag"].dag_id, context["run_id"], params["cluster"]))


GATE_SEQ = "gate"  # the gate's own journal entry: execute started (intent) / ended (done, failed)


def render_plan(action: GateAction, plan: dict, digest: str,
                timeout: dt.timedelta = DEFAULT_RESPONSE_TIMEOUT) -> str:
    return render("plan.md.j2", plan=plan, digest=digest, details_table=action.details_table(plan),
                  timeout=_human(timeout))


def _human(td: dt.timedelta) -> str:
    s = int(td.total_seconds())
    return f"{s // 3600} h" if s % 3600 == 0 and s >= 3600 else f"{s // 60} min" if s % 60 == 0 else f"{s} s"


def _audit(params: dict, context, action: str, event: str, **kw) -> dict:
    return audit.record(DataRoot(params.get("data_root") or settings.data_root()), cluster=params["cluster"],
                        dag_id=context["dag"].dag_id, run_id=context["run_id"], action=action, event=event, **kw)


# -- runbook DAGs ------------------------------------------------------------------------------
def runbook_dag_args(dag_id: str, description: str, doc_md: str, params: dict, **overrides) -> dict:
    """The keyword arguments every destructive runbook DAG shares (manual trigger, no retries), with
    the gate's own params (cluster, dry_run, approval_timeout, fleet_file, data_root) after the
    runbook's (which come first in the trigger form)."""
    from airflow.sdk import Param

    gate_params = {
        "dry_run": Param(True, type="boolean", description="plan and render only (default)"),
        "approval_timeout": Param(int(DEFAULT_RESPONSE_TIMEOUT.total_seconds()), type="integer", minimum=10,
                                  description="seconds to wait for an approver; no answer = Reject"),
        "fleet_file": Param(settings.fleet_file(), type="string"),
        "data_root": Param(settings.data_root(), type="string"),
    }
    args = {
        "dag_id": dag_id, "description": description, "doc_md": doc_md, "schedule": None,
        "start_date": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), "catchup": False,
        "tags": ["fleet", "runbook", "destructive"], "default_args": {"retries": 0},
        "user_defined_filters": settings.TEMPLATE_FILTERS,
        "params": {"cluster": Param("lab", type="string", minLength=1, description="cluster name from the fleet file"),
                   **params, **gate_params},
    }
    args.update(overrides)
    return args


# -- the approval operator -------------------------------------------------------------------
class PlanApprovalOperator(ApprovalOperator):
    """ApprovalOperator showing a stored plan: subject and body are built from the plan file at run
    time; the digest the approver saw is kept in this task's XCom (key plan_digest)."""

    def __init__(self, *, action: GateAction, **kwargs):
        kwargs.setdefault("subject", f"Approve {action.name}")
        kwargs.setdefault("defaults", "Reject")
        kwargs.setdefault("response_timeout", DEFAULT_RESPONSE_TIMEOUT)
        super().__init__(**kwargs)
        self.action = action

    def execute(self, context):
        params = context["params"]
        if params.get("approval_timeout"):
            self.response_timeout = dt.timedelta(seconds=int(params["approval_timeout"]))
        cluster = _cluster(params)
        plan, digest = plans.load(plans_root(params), context["dag"].dag_id, context["run_id"])
        # the title names groups and topics: one line, bidi and zero-width characters shown escaped
        self.subject = visible_controls(f"{self.action.name} on cluster {cluster.name}: {plan['title']}")[:250]
        self.body = render_plan(self.action, plan, digest, self.response_timeout or DEFAULT_RESPONSE_TIMEOUT)
        if cluster.approvers:
            self.assigned_users = [{"id": a, "name": a} for a in cluster.approvers]
        context["ti"].xcom_push(key="plan_digest", value=digest)
        self.log.info("waiting for approval of plan %s (approvers: %s, timeout %s)", digest,
                      ", ".join(cluster.approvers) or "any user with access", self.response_timeout)
        return super().execute(context)

    def execute_complete(self, context, event):
        params = context["params"]
        chosen = (event.get("chosen_options") or ["?"])[0] if isinstance(event, dict) else "?"
        user = event.get("responded_by_user") if isinstance(event, dict) else None
        actor = (user or {}).get("name") or (user or {}).get("id") or ("timeout" if event.get("timedout") else None)
        digest = context["ti"].xcom_pull(task_ids=self.task_id, key="plan_digest")
        decided = "approved" if chosen == self.APPROVE else "rejected"
        _audit(params, context, self.action.name, decided, actor=actor or "unknown", digest=digest,
               message=f"{chosen} by {actor or 'unknown'}" + (" (no answer before the timeout)" if actor is None else ""))
        return super().execute_complete(context, event)


# -- the factory -----------------------------------------------------------------------------
def approval_gate(action: GateAction, response_timeout: dt.timedelta = DEFAULT_RESPONSE_TIMEOUT):
    """Create the gate's tasks in the current DAG context; returns (first, last) tasks."""
    from airflow.sdk import task

    @task(task_id="plan")
    def plan_task(**context) -> dict:
        params = context["params"]
        try:
            run_params = dict(params, _dag_id=context["dag"].dag_id, _run_id=context["run_id"])
            plan = _with_cluster(params, lambda ctx: action.plan(ctx, run_params))
            plan.update(dag_id=context["dag"].dag_id, run_id=context["run_id"])
            path, digest = plans.store(plans_root(params), context["dag"].dag_id, context["run_id"], plan)
        except FleetError as e:
            raise AirflowFailException(str(e)) from None
        log.info("plan stored at %s, digest %s\n%s", path, digest, render_plan(action, plan, digest, response_timeout))
        _audit(params, context, action.name, "planned", digest=digest, message=plan["title"],
               details={"changes": plan["changes"]})
        return {"digest": digest, "title": plan["title"], "changes": len(plan["changes"])}

    @task.short_circuit(task_id="dry_run_stop")
    def dry_run_stop(**context) -> bool:
        params = context["params"]
        if params.get("dry_run", True):
            _, digest = plans.load(plans_root(params), context["dag"].dag_id, context["run_id"])
            _audit(params, context, action.name, "dry_run", digest=digest,
                   message="dry run: plan rendered, nothing executed (trigger again with dry_run false to execute)")
            log.info("dry run: stopping after the plan; nothing will change")
            return False
        return True

    approve = PlanApprovalOperator(task_id="approve", action=action, response_timeout=response_timeout)

    @task(task_id="lock")
    def lock_task(**context) -> str:
        # keyed by the cluster's identity (its cluster id, or ZooKeeper ensemble + chroot), so two
        # fleet-file names of one cluster share the lock; a holder run that no longer runs is
        # reported (how to clear it), never taken over. Whether it runs: the task SDK's
        # RuntimeTaskInstance.get_dr_count / get_dagrun_state (the execution API, no database access).
        from fleetkit.core.locks import RUNNING_STATES

        params, ti = context["params"], context["ti"]
        owner = f"{context['dag'].dag_id}/{context['run_id']}"

        def holder_running(dag_id: str, run_id: str):
            if ti.get_dr_count(dag_id=dag_id, run_ids=[run_id]) == 0:
                return False, "no such run"
            state = str(ti.get_dagrun_state(dag_id=dag_id, run_id=run_id))
            return state in RUNNING_STATES, state

        try:
            lock = _with_cluster(params, lambda ctx: ClusterLock.for_cluster(lock_dir(), ctx.cluster, ctx.kafka, ctx.zk))
            lock.acquire(owner, context["dag"].dag_id, context["run_id"], holder_running=holder_running)
        except FleetError as e:
            _audit(params, context, action.name, "refused", message=str(e))
            raise AirflowFailException(str(e)) from None
        ti.xcom_push(key="lock_identity", value=lock.identity)
        log.info("locked cluster %s (%s) for %s: %s", params["cluster"], lock.identity, owner, lock.path)
        return owner

    @task(task_id="execute")
    def execute_task(**context) -> dict:
        params, ti = context["params"], context["ti"]
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        response = ti.xcom_pull(task_ids="approve") or {}
        approved_digest = ti.xcom_pull(task_ids="approve", key="plan_digest")
        chosen = response.get("chosen_options") or []
        user = response.get("responded_by_user") or {}
        actor = user.get("name") or user.get("id") or "unknown"

        def refuse(msg: str, details: dict | None = None):
            _audit(params, context, action.name, "refused", actor=actor, digest=approved_digest, message=msg,
                   details=details)
            raise AirflowFailException(f"REFUSED, nothing executed: {msg}")

        if chosen != [ApprovalOperator.APPROVE]:
            refuse(f"the approval task did not answer Approve (answer: {chosen or 'none'})")
        try:
            plan, digest_now = plans.load(plans_root(params), dag_id, run_id)
        except FleetError as e:
            refuse(str(e))
        if digest_now != approved_digest:
            refuse(f"the stored plan changed after approval: approved {approved_digest}, stored plan is now "
                   f"{digest_now}. Re-run the runbook to plan and approve again.",
                   {"approved_digest": approved_digest, "stored_digest": digest_now})

        journal_file = execute_journal(params, action, context)

        def run(ctx: ClusterContext) -> dict:
            problems = action.check(ctx, plan)
            if problems:
                refuse("preconditions no longer hold: " + "; ".join(problems), {"problems": problems})
            log.info("preconditions hold; executing %s approved by %s (plan %s); journal %s", action.name, actor,
                     digest_now, journal_file)
            with run_journal.Journal(journal_file) as j:
                j.intent(GATE_SEQ, step="execute", actor=actor, digest=digest_now)
            try:
                out = action.execute(ctx, plan)
            except Exception as e:
                with run_journal.Journal(journal_file) as j:
                    j.outcome(GATE_SEQ, "failed", error=f"{type(e).__name__}: {e}")
                account = run_journal.summary(journal_file)
                _audit(params, context, action.name, "failed", actor=actor, digest=digest_now,
                       message=f"execute failed after {len(account['done'])} change(s) made, "
                               f"{len(account['unknown'])} of unknown outcome: {type(e).__name__}: {e}",
                       details={"journal": account, "rollback": plan["rollback"]})
                raise
            with run_journal.Journal(journal_file) as j:
                j.outcome(GATE_SEQ, "done")
            return out

        try:
            result = _with_cluster(params, run, journal_path=journal_file)
        except FleetError as e:
            raise AirflowFailException(str(e)) from None
        _audit(params, context, action.name, "executed", actor=actor, digest=digest_now,
               message=f"executed, approved by {actor}", details={"result": result, "rollback": plan["rollback"]})
        return result

    @task(task_id="verify")
    def verify_task(**context) -> str:
        params = context["params"]
        plan, digest = plans.load(plans_root(params), context["dag"].dag_id, context["run_id"])
        result = context["ti"].xcom_pull(task_ids="execute") or {}
        problems = _with_cluster(params, lambda ctx: action.verify(ctx, plan, result))
        if problems:
            _audit(params, context, action.name, "verify_failed", digest=digest, message="; ".join(problems),
                   details={"problems": problems, "rollback": plan["rollback"]})
            raise AirflowFailException("verification failed: " + "; ".join(problems))
        _audit(params, context, action.name, "verified", digest=digest, message="verified: the cluster reads back the plan")
        return "verified"

    @task(task_id="cleanup")
    def cleanup_task(**context) -> list[str]:
        """Teardown: record an execute that started and never finished, then the action's teardown."""
        params = context["params"]
        journal_file = execute_journal(params, action, context)
        gate_entry = run_journal.read_journal(journal_file).get(GATE_SEQ)
        if gate_entry is None:
            log.info("execute never started: nothing to clean up")
            return []
        plan, digest = plans.load(plans_root(params), context["dag"].dag_id, context["run_id"])
        if gate_entry["status"] == "intent":
            account = run_journal.summary(journal_file)
            _audit(params, context, action.name, "interrupted", actor=gate_entry.get("actor"), digest=digest,
                   message=f"execute started and never finished (killed or lost): {len(account['done'])} change(s) "
                           f"made, {len(account['unknown'])} of unknown outcome; see the journal {journal_file}",
                   details={"journal": account, "rollback": plan["rollback"]})
        done = _with_cluster(params, lambda ctx: action.teardown(ctx, plan), journal_path=journal_file)
        if done:
            _audit(params, context, action.name, "teardown", digest=digest, message="; ".join(done),
                   details={"done": done})
        return done

    @task(task_id="unlock")
    def unlock_task(**context) -> bool:
        # the identity the lock task took (no need to reach the cluster again); none: never locked
        owner = f"{context['dag'].dag_id}/{context['run_id']}"
        identity = context["ti"].xcom_pull(task_ids="lock", key="lock_identity")
        if not identity:
            log.info("this run holds no lock (the lock task did not take it)")
            return False
        released = ClusterLock(lock_dir(), identity, context["params"]["cluster"]).release(owner)
        log.info("lock of %s (%s) %s", context["params"]["cluster"], identity,
                 "released" if released else "was not held by this run")
        return released

    planned = plan_task()
    stop = dry_run_stop()
    lock = lock_task()
    executed = execute_task()
    verified = verify_task()
    cleanup = cleanup_task()
    unlock = unlock_task()
    planned >> stop >> approve >> lock >> executed >> verified >> cleanup.as_teardown(setups=lock)
    cleanup >> unlock.as_teardown(setups=lock)
    return planned, unlock
