"""The approval gate: plan -> render -> approve -> execute -> verify -> audit, built once.

A runbook DAG gets it with ``approval_gate(action)``, where ``action`` is a ``GateAction``: how to
plan from the run's params, which preconditions to re-check, how to execute and how to verify.

* Where things live is a deployment setting, not a trigger param: the fleet file (FLEET_FILE,
  which names the approvers) and the data root (FLEET_DATA_ROOT: plans, audit). A run whose conf
  names ``fleet_file`` or ``data_root`` is refused at plan.
* The plan is data, stored under the plans folder at a path derived from (DAG, run) and digested
  (SHA-256 over its canonical JSON). Nothing downstream trusts a value the plan task passes on.
  The plan is refused when the cluster lists no ``approvers`` in the fleet file.
* ``approve`` is Airflow's ApprovalOperator: subject names the action and the cluster, the body is
  the plan rendered to Markdown (every cluster-supplied name escaped), with its digest. It is
  assigned to the cluster's approvers minus the run's requesters (see ``requesters``); the timeout
  (4 h by default) resolves to Reject. The request and, when the task resumes, the answer Airflow
  hands it from its HITL record (the resume event built from the task's ``hitl_detail`` row) are
  written to ``approval.json`` beside the plan: a file the REST API cannot write, unlike XCom.
* ``execute`` reads the decision and the approver from ``approval.json`` only, refuses when there
  is no answer (an approval task marked success by hand), when the answer is not Approve, when the
  approver requested the run (self-approval) or is not a listed approver, when the stored plan's
  digest differs from the approved one or a precondition no longer holds (naming what changed),
  then acts.
* ``execute`` journals its start and end (fleetkit.core.journal, fsync) next to the action's own
  per-change journal; an exception leaves a ``failed`` audit record with the journal's account of
  what was changed. ``cleanup`` is a teardown: it runs whatever happened to ``execute`` (failed,
  killed, skipped) and first records ``interrupted`` when execute started but never finished, then
  runs the action's own teardown (the trim starts a broker it stopped), before ``unlock``.
* Every step lands in the audit dataset and in the task log; every refusal is a ``refused``
  record with its actor and reason. Dry run (the default) stops after the plan is rendered. One
  destructive runbook at a time per cluster (a lock held from just before execution until
  verification ends).

Who requested a run (none of them may approve it): the user named by the conf key
``requested_by`` (``fleetctl audit rollback`` records the OS user or ``--requested-by``; a DAG
starting a runbook for someone sets it) and the user Airflow recorded as triggering the run
(``dag_run.triggering_user_name``; a run started by TriggerDagRunOperator inherits its parent's).
Both count: the conf is chosen by whoever triggers, so it can add a requester, never replace the
triggering user. When there is neither (an asset-triggered run, a run started by a scheduled DAG),
any listed approver may approve.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.providers.standard.operators.hitl import ApprovalOperator

from fleetkit.core import audit
from fleetkit.core import journal as run_journal
from fleetkit.core.action import Action, ClusterContext
from fleetkit.core import plans
from fleetkit.core.datasets import DataRoot
from fleetkit.core.errors import FleetConfigError, FleetError
from fleetkit.core.fleet import Cluster, load_fleet
from fleetkit.core.locks import ClusterLock
from fleetkit.core.render import render, visible_controls

from fleet_airflow import settings
# the conf may not name a deployment setting: the check lives beside the settings, shared with every DAG
from fleet_airflow.settings import DEPLOYMENT_KEYS, deployment_keys_in  # noqa: F401

log = logging.getLogger(__name__)

DEFAULT_RESPONSE_TIMEOUT = dt.timedelta(hours=4)


# The action contract lives in the domain library; the gate only runs it.
GateAction = Action


def data_root() -> str:
    """The data root of the deployment (FLEET_DATA_ROOT): plans, audit, journals."""
    return settings.data_root()


def plans_root(params: dict | None = None) -> str:
    """The deployment's plans folder (``params`` is accepted and ignored: never a trigger param)."""
    return settings.plans_root(data_root())


def lock_dir() -> str:
    return settings.lock_dir()


def _cluster(params: dict) -> Cluster:
    return load_fleet(settings.fleet_file()).cluster(params["cluster"])


def _with_cluster(params: dict, fn: Callable[[ClusterContext], Any], journal_path=None) -> Any:
    from fleet_airflow import clusters

    cluster = _cluster(params)
    with clusters.connected(cluster) as (kafka, zk):
        return fn(ClusterContext(cluster, kafka, zk, journal_path=journal_path,
                                 open_zookeeper=lambda store: clusters.offset_store_zookeeper(cluster, store)))


def execute_journal(params: dict, action: GateAction, context) -> str:
    """Where this run's execute journals its changes (derived from the run, never passed along)."""
    return str(run_journal.journal_path(data_root(), action.name,
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
    return audit.record(DataRoot(data_root()), cluster=params["cluster"],
                        dag_id=context["dag"].dag_id, run_id=context["run_id"], action=action, event=event, **kw)


# -- who may approve (pure) --------------------------------------------------------------------
REQUESTED_BY = "requested_by"


def requesters(conf: dict | None, triggering_user: str | None) -> tuple[str, ...]:
    """Who asked for the run (none of them may approve it): the conf's ``requested_by`` and the
    triggering user Airflow recorded, both when both are present. Empty when no person asked."""
    out: list[str] = []
    named = (conf or {}).get(REQUESTED_BY)
    if named is not None:
        if not isinstance(named, str) or not named.strip():
            raise FleetError(f"conf key {REQUESTED_BY!r} must be a user name, got {named!r}")
        out.append(named.strip())
    if triggering_user and triggering_user not in out:
        out.append(triggering_user)
    return tuple(out)


def require_approvers(cluster: Cluster, fleet_file: str) -> tuple[str, ...]:
    """The cluster's approvers; FleetConfigError naming the file, cluster and field when empty."""
    if not cluster.approvers:
        raise FleetConfigError(
            f"{fleet_file}: clusters[{cluster.name}].approvers: no approvers listed; the field 'approvers' "
            "(the Airflow users who may approve a plan on this cluster) is required for destructive runbooks")
    return cluster.approvers


def eligible_approvers(approvers: tuple[str, ...], requested_by: tuple[str, ...]) -> list[str]:
    return [a for a in approvers if a not in requested_by]


def approver_problem(approver: str | None, approvers: tuple[str, ...], requested_by: tuple[str, ...],
                     cluster: str, fleet_file: str) -> str | None:
    """Why `approver` may not approve this run, or None."""
    if not approver:
        return "the answer names no approver"
    if approver in requested_by:
        return (f"self-approval: {approver!r} requested this run (requested by {', '.join(map(repr, requested_by))}); "
                "another listed approver must approve it")
    if approver not in approvers:
        return (f"{approver!r} is not an approver of cluster {cluster!r} "
                f"({fleet_file}: clusters[{cluster}].approvers: {', '.join(approvers) or 'none'})")
    return None


def _run_requesters(context) -> tuple[str, ...]:
    dr = context["dag_run"]
    return requesters(getattr(dr, "conf", None), getattr(dr, "triggering_user_name", None))


# -- the approval record (beside the plan; written only by the approval task) ---------------------
def approval_path(dag_id: str, run_id: str) -> Path:
    return plans.plan_path(plans_root(), dag_id, run_id).with_name("approval.json")


def read_approval(dag_id: str, run_id: str) -> dict | None:
    try:
        return json.loads(approval_path(dag_id, run_id).read_text())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise FleetError(f"approval record {approval_path(dag_id, run_id)} is not valid JSON: {e}") from None


def write_approval(dag_id: str, run_id: str, record: dict) -> Path:
    path = approval_path(dag_id, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        json.dump(record, f, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


# -- runbook DAGs ------------------------------------------------------------------------------
WHO_APPROVES_MD = """
**Who approves**: a user listed in the fleet file's `approvers` of the cluster (a runbook refuses
to plan on a cluster with none), never the one who requested the run: the user who triggered it
and the user named by the conf key `requested_by` (`fleetctl audit rollback` records the OS user
or `--requested-by`). A run no person triggered (started by an asset or by a scheduled DAG) may be
approved by any listed approver. `execute` reads the answer Airflow's HITL record gave the
`approve` task, never XCom: an `approve` task marked success by hand executes nothing (audited
`refused`). The fleet file and the data root are deployment settings (`FLEET_FILE`,
`FLEET_DATA_ROOT`), not trigger params.
"""


def runbook_dag_args(dag_id: str, description: str, doc_md: str, params: dict, **overrides) -> dict:
    """The keyword arguments every destructive runbook DAG shares (manual trigger, no retries), with
    the gate's own params (cluster, dry_run, approval_timeout) after the runbook's (which come first
    in the trigger form). The fleet file and the data root are deployment settings, not params:
    templates read them as ``{{ fleet_settings.fleet_file }}`` / ``{{ fleet_settings.data_root }}``."""
    from airflow.sdk import Param

    gate_params = {
        "dry_run": Param(True, type="boolean", description="plan and render only (default)"),
        "approval_timeout": Param(int(DEFAULT_RESPONSE_TIMEOUT.total_seconds()), type="integer", minimum=10,
                                  description="seconds to wait for an approver; no answer = Reject"),
    }
    args = {
        "dag_id": dag_id, "description": description, "doc_md": doc_md.rstrip() + "\n" + WHO_APPROVES_MD,
        "schedule": None,
        "start_date": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), "catchup": False,
        "tags": ["fleet", "runbook", "destructive"], "default_args": {"retries": 0},
        "user_defined_filters": settings.TEMPLATE_FILTERS, "user_defined_macros": settings.DEPLOYMENT_MACROS,
        "params": {"cluster": Param("lab", type="string", minLength=1, description="cluster name from the fleet file"),
                   **params, **gate_params},
    }
    args.update(overrides)
    return args


# -- the approval operator -------------------------------------------------------------------
class PlanApprovalOperator(ApprovalOperator):
    """ApprovalOperator showing a stored plan: subject and body are built from the plan file at run
    time, the request is assigned to the cluster's approvers who did not request the run. The
    request (digest shown, requesters, assignees) and the answer Airflow resumes this task with
    (its HITL record) are written to the run's approval record, which ``execute`` reads."""

    def __init__(self, *, action: GateAction, **kwargs):
        kwargs.setdefault("subject", f"Approve {action.name}")
        kwargs.setdefault("defaults", "Reject")
        kwargs.setdefault("response_timeout", DEFAULT_RESPONSE_TIMEOUT)
        super().__init__(**kwargs)
        self.action = action

    def _refuse(self, context, msg: str, actor: str | None = None, digest: str | None = None):
        _audit(context["params"], context, self.action.name, "refused", actor=actor, digest=digest, message=msg)
        raise AirflowFailException(f"REFUSED, no approval requested: {msg}")

    def execute(self, context):
        params, ti = context["params"], context["ti"]
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        if params.get("approval_timeout"):
            self.response_timeout = dt.timedelta(seconds=int(params["approval_timeout"]))
        fleet_file = settings.fleet_file()
        try:
            cluster = _cluster(params)
            asked_by = _run_requesters(context)
            approvers = require_approvers(cluster, fleet_file)
            plan, digest = plans.load(plans_root(), dag_id, run_id)
        except FleetError as e:
            self._refuse(context, str(e))
        eligible = eligible_approvers(approvers, asked_by)
        if not eligible:
            self._refuse(context, f"every approver of cluster {cluster.name!r} requested this run "
                                  f"({', '.join(asked_by)}): nobody else may approve it; add another user to "
                                  f"{fleet_file}: clusters[{cluster.name}].approvers", ", ".join(asked_by), digest)
        # the title names groups and topics: one line, bidi and zero-width characters shown escaped
        self.subject = visible_controls(f"{self.action.name} on cluster {cluster.name}: {plan['title']}")[:250]
        self.body = render_plan(self.action, plan, digest, self.response_timeout or DEFAULT_RESPONSE_TIMEOUT)
        self.assigned_users = [{"id": a, "name": a} for a in eligible]
        # a new request: an answer recorded by an earlier try no longer counts
        write_approval(dag_id, run_id, {
            "dag_id": dag_id, "run_id": run_id, "ti_id": str(ti.id), "try_number": ti.try_number,
            "digest": digest, "requested_by": list(asked_by), "assigned": eligible,
            "requested_at": dt.datetime.now(dt.timezone.utc).isoformat(), "answer": None})
        context["ti"].xcom_push(key="plan_digest", value=digest)  # shown to people; execute never reads it
        self.log.info("waiting for approval of plan %s (may approve: %s; requested by: %s; timeout %s)", digest,
                      ", ".join(eligible), ", ".join(asked_by) or "nobody (no person triggered this run)",
                      self.response_timeout)
        return super().execute(context)

    def execute_complete(self, context, event):
        params, ti = context["params"], context["ti"]
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        event = event if isinstance(event, dict) else {}
        chosen = list(event.get("chosen_options") or [])
        user = event.get("responded_by_user") or {}
        if not isinstance(user, dict):  # a HITLUser model
            user = {"id": getattr(user, "id", None), "name": getattr(user, "name", None)}
        approver = user.get("name") or user.get("id")
        timedout = bool(event.get("timedout")) or ("error" in event and event.get("error_type") == "timeout")
        actor = approver or ("timeout" if timedout else None)
        record = read_approval(dag_id, run_id)
        if record is None or record.get("ti_id") != str(ti.id):
            # the request written by this task instance is gone or belongs to another: nothing to trust
            _audit(params, context, self.action.name, "refused", actor=actor or "unknown",
                   message=f"the approval record {approval_path(dag_id, run_id)} does not hold this task's request")
            raise AirflowFailException("REFUSED: the approval record does not hold this task's request")
        responded_at = event.get("responded_at")
        record["answer"] = {"chosen_options": chosen, "approver": approver, "responded_by_user": user or None,
                            "responded_at": responded_at.isoformat() if hasattr(responded_at, "isoformat")
                            else responded_at, "timedout": timedout, "try_number": ti.try_number}
        write_approval(dag_id, run_id, record)
        choice = chosen[0] if chosen else "?"
        decided = "approved" if choice == self.APPROVE else "rejected"
        _audit(params, context, self.action.name, decided, actor=actor or "unknown", digest=record["digest"],
               message=f"{choice} by {actor or 'unknown'}" + (" (no answer before the timeout)" if approver is None else ""))
        return super().execute_complete(context, event)


# -- the factory -----------------------------------------------------------------------------
def approval_gate(action: GateAction, response_timeout: dt.timedelta = DEFAULT_RESPONSE_TIMEOUT):
    """Create the gate's tasks in the current DAG context; returns (first, last) tasks."""
    from airflow.sdk import task

    @task(task_id="plan")
    def plan_task(**context) -> dict:
        params = context["params"]
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        asked_by: tuple[str, ...] = ()
        try:
            asked_by = _run_requesters(context)
            wrong = deployment_keys_in(context["dag_run"].conf)
            if wrong:
                raise FleetError(wrong)
            require_approvers(_cluster(params), settings.fleet_file())
        except FleetError as e:
            _audit(params, context, action.name, "refused", actor=", ".join(asked_by) or None, message=str(e))
            raise AirflowFailException(f"REFUSED, nothing planned: {e}") from None
        try:
            run_params = dict(params, data_root=data_root(), _dag_id=dag_id, _run_id=run_id)
            run_params.pop("fleet_file", None)
            plan = _with_cluster(params, lambda ctx: action.plan(ctx, run_params))
            plan.update(dag_id=dag_id, run_id=run_id)
            path, digest = plans.store(plans_root(), dag_id, run_id, plan)
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
            _, digest = plans.load(plans_root(), context["dag"].dag_id, context["run_id"])
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
        params = context["params"]
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        try:
            record, unreadable = read_approval(dag_id, run_id) or {}, None
        except FleetError as e:
            record, unreadable = {}, str(e)
        answer = record.get("answer") or {}
        approved_digest = record.get("digest")
        actor = answer.get("approver") or "unknown"

        def refuse(msg: str, details: dict | None = None):
            _audit(params, context, action.name, "refused", actor=actor, digest=approved_digest, message=msg,
                   details=details)
            raise AirflowFailException(f"REFUSED, nothing executed: {msg}")

        if unreadable:
            refuse(unreadable)
        if not answer:
            claimed = json.loads(json.dumps(context["ti"].xcom_pull(task_ids="approve"), default=str))
            refuse("the approval task recorded no answer from Airflow's HITL record of this run (an approval "
                   "task marked success by hand, or its answer never reached it): nothing was approved",
                   {"approval_record": str(approval_path(dag_id, run_id)), "xcom_claimed": claimed})
        chosen = answer.get("chosen_options") or []
        if chosen != [ApprovalOperator.APPROVE]:
            refuse(f"the approval task did not answer Approve (answer: {chosen or 'none'})")
        fleet_file = settings.fleet_file()
        try:
            asked_by = tuple(dict.fromkeys(_run_requesters(context) + tuple(record.get("requested_by") or ())))
            cluster = _cluster(params)
            approvers = require_approvers(cluster, fleet_file)
            plan, digest_now = plans.load(plans_root(), dag_id, run_id)
        except FleetError as e:
            refuse(str(e))
        problem = approver_problem(answer.get("approver"), approvers, asked_by, cluster.name, fleet_file)
        if problem:
            refuse(problem, {"approver": answer.get("approver"), "requested_by": list(asked_by),
                             "approvers": list(approvers)})
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
        plan, digest = plans.load(plans_root(), context["dag"].dag_id, context["run_id"])
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
        plan, digest = plans.load(plans_root(), context["dag"].dag_id, context["run_id"])
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
