"""The approval gate: the runbook engine (fleetkit.core.runbook) as Airflow tasks.

A runbook DAG gets it with ``approval_gate(action)``, where ``action`` is a ``GateAction``: how to
plan from the run's params, which preconditions to re-check, how to execute and how to verify.
Every check (who may approve, the approval record, the lock, the journal, the audit) is the
engine's; this module only turns it into tasks: plan, dry_run_stop, approve, approve_second, lock,
execute, verify, cleanup, unlock.

* Where things live is a deployment setting, not a trigger param: the fleet file (FLEET_FILE,
  which names the approvers) and the data root (FLEET_DATA_ROOT: plans, audit). A run whose conf
  names ``fleet_file`` or ``data_root`` is refused at plan.
* The plan is data, stored under the plans folder at a path derived from (DAG, run) and digested
  (SHA-256 over its canonical JSON). Nothing downstream trusts a value the plan task passes on.
  The plan is refused when the cluster lists no ``approvers`` in the fleet file.
* ``approve`` is Airflow's ApprovalOperator: subject names the action and the cluster, the body is
  the plan rendered to Markdown (every cluster-supplied name escaped), with its digest. It is
  assigned to the cluster's approvers minus the run's requesters; the timeout (4 h by default)
  resolves to Reject. The request and, when the task resumes, the answer Airflow hands it from its
  HITL record are written to the approval record beside the plan (a file the REST API cannot
  write, unlike XCom). An Approve is audited ``approved`` only when the engine accepts it (a
  listed approver who did not request the run, for the stored plan); otherwise ``refused``.
* ``execute`` asks the engine (``Runbook.approved``): an answer, Approve, an eligible approver,
  the stored plan's digest, the ``approved`` audit record and no ``refused`` / ``rejected`` one
  (a refusal is final on every path); then the preconditions, naming what changed; then acts.
* ``execute`` journals its start and end in the capability's journal (the engine's ``GATE_SEQ``
  entry) next to the action's own per-change entries; an exception leaves a ``failed`` audit
  record with the journal's account of what was changed. ``cleanup`` is a teardown: it runs
  whatever happened to ``execute`` and first records ``interrupted`` when execute started but
  never finished, then runs the action's own teardown, before ``unlock``.
* Dry run (the default) stops after the plan is rendered. One destructive runbook at a time per
  cluster (the engine's lock, held from just before execution until verification ends).

Who requested a run (none of them may approve it): the user Airflow recorded as triggering the run
(``dag_run.triggering_user_name``; a run started by TriggerDagRunOperator inherits its parent's;
``fleetctl audit rollback`` triggers with the caller's own Airflow identity) and the user named by
the conf key ``requested_by`` (a DAG starting a runbook for someone sets it). The conf can add a
requester, never replace the triggering user. A run with no requester (an asset event, a scheduled
DAG) needs a second approval (``approve_second``) by another listed approver.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any, Callable

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.providers.standard.exceptions import HITLTriggerEventError
from airflow.providers.standard.operators.hitl import ApprovalOperator

from fleetkit.core.action import Action, ClusterContext
from fleetkit.core import plans
from fleetkit.core.errors import FleetError
from fleetkit.core.fleet import Cluster, load_fleet
from fleetkit.core.render import render, visible_controls
from fleetkit.core.runbook import (SECOND, TRIGGERING_USER, Refused, Runbook, VerifyFailed, eligible_approvers,
                                   needs_second_approver, require_approvers, requesters)

from fleet_airflow import settings
from fleet_airflow.notifiers import FleetAlertNotifier, approval_page_url
# the conf may not name a deployment setting: the check lives beside the settings, shared with every DAG
from fleet_airflow.settings import deployment_keys_in
from fleet_airflow.triggers.earlier_answer import EarlierAnswerTrigger, user_dict

log = logging.getLogger(__name__)

DEFAULT_RESPONSE_TIMEOUT = dt.timedelta(hours=4)
#: tries after the first of an approval task (see PlanApprovalOperator), and the pause before each
APPROVAL_RETRIES = 2
APPROVAL_RETRY_DELAY = dt.timedelta(seconds=5)
#: how long a retry waits before it reads the earlier try's answer (past that try's executor event)
APPROVAL_SETTLE = dt.timedelta(seconds=10)


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


def _with_cluster(params: dict, fn: Callable[[ClusterContext], Any], journal_path=None, changes: bool = False) -> Any:
    """`fn` over the cluster's connections: the runbook principal's when `changes` (execute,
    teardown: the steps that change the cluster), the read-only one's otherwise (plan, lock, verify)."""
    from fleet_airflow import clusters

    cluster = _cluster(params)
    with clusters.connected(cluster, changes=changes) as (kafka, zk), clusters.broker_hosts(cluster) as hosts:
        return fn(ClusterContext(cluster, kafka, zk, journal_path=journal_path,
                                 open_zookeeper=lambda store: clusters.offset_store_zookeeper(cluster, store,
                                                                                              changes=changes),
                                 open_runbook_kafka=lambda: clusters.kafka_for(cluster, changes=True),
                                 broker_hosts=hosts))


def runbook(params: dict, action: GateAction, context) -> Runbook:
    """The engine's view of this run (deployment settings: fleet file, data root, lock folder; the
    shared run state's store installed for the task's process: FLEET_STATE_CONN_ID)."""
    from fleet_airflow import clusters

    clusters.install_state()
    return Runbook(capability=action.capability, action=action.name, dag_id=context["dag"].dag_id,
                   run_id=context["run_id"], cluster=params["cluster"], data_root=data_root(),
                   fleet_file=settings.fleet_file(), lock_dir=lock_dir())


def render_plan(action: GateAction, plan: dict, digest: str,
                timeout: dt.timedelta = DEFAULT_RESPONSE_TIMEOUT) -> str:
    return render("plan.md.j2", plan=plan, digest=digest, details_table=action.details_table(plan),
                  timeout=_human(timeout))


def _human(td: dt.timedelta) -> str:
    s = int(td.total_seconds())
    return f"{s // 3600} h" if s % 3600 == 0 and s >= 3600 else f"{s // 60} min" if s % 60 == 0 else f"{s} s"


def _audit(params: dict, context, action: GateAction, event: str, **kw) -> dict:
    return runbook(params, action, context).audit(event, **kw)


def _run_requesters(context) -> tuple[str, ...]:
    """Who may not approve this run: the user Airflow recorded as triggering it, and anyone its conf
    names (`requested_by`)."""
    dr = context["dag_run"]
    return requesters(getattr(dr, "conf", None), _triggering_user(context))


def _triggering_user(context) -> str | None:
    """The user Airflow recorded as triggering this run (None: no person did); what alone decides
    whether a second approver is needed (a conf name never waives it)."""
    return getattr(context["dag_run"], "triggering_user_name", None) or None


# -- runbook DAGs ------------------------------------------------------------------------------
WHO_APPROVES_MD = """
**Who approves**: a user listed in the fleet file's `approvers` of the cluster (a runbook refuses
to plan on a cluster with none), never the one who requested the run: the user who triggered it
(`fleetctl audit rollback` triggers as the caller's own Airflow user) and the user named by the
conf key `requested_by`. A run no person triggered (Airflow recorded no triggering user: an asset
event, a scheduled DAG) needs two different listed approvers: `approve`, then `approve_second`
(which passes through without asking anyone when Airflow recorded who triggered the run). A
`requested_by` in the conf only adds someone who may not approve; it never waives the second approval. `execute` reads the answer Airflow's HITL record gave the
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
        "tags": ["fleet", "runbook", "destructive"], "default_args": settings.deployment_default_args(),
        "user_defined_filters": settings.TEMPLATE_FILTERS, "user_defined_macros": settings.DEPLOYMENT_MACROS,
        "params": {"cluster": Param(type="string", minLength=1, description="cluster name from the fleet file"),
                   **params, **gate_params},
    }
    args.update(overrides)
    return args


# -- the approval operator -------------------------------------------------------------------
class PlanApprovalOperator(ApprovalOperator):
    """ApprovalOperator showing a stored plan: subject and body are built from the plan file at run
    time, the request is assigned to the cluster's approvers who did not request the run. The
    request (digest shown, requesters, assignees) and the answer Airflow resumes this task with
    (its HITL record) are written to the run's approval record, which ``execute`` reads.

    ``second=True``: the second approval of a run no person requested (an asset event, a scheduled
    DAG): assigned to the approvers other than the first one; a run with a requester passes through
    it without asking anyone."""

    def __init__(self, *, action: GateAction, second: bool = False, **kwargs):
        kwargs.setdefault("subject", f"Approve {action.name}")
        kwargs.setdefault("defaults", "Reject")
        kwargs.setdefault("response_timeout", DEFAULT_RESPONSE_TIMEOUT)
        # the one task of a runbook that retries: Airflow's scheduler may fail an approval task that
        # an answer resumed before it processed the executor event of the run that parked it (a
        # person who answers within seconds); the next try takes the answer Airflow holds for the
        # earlier request (resume_with_earlier_answer), or asks again. Refusals raise
        # AirflowFailException: they never retry.
        kwargs["retries"] = APPROVAL_RETRIES  # over default_args' "no retries"
        kwargs["retry_delay"] = APPROVAL_RETRY_DELAY
        super().__init__(**kwargs)
        self.action = action
        self.second = second

    def _refuse(self, context, msg: str, actor: str | None = None, digest: str | None = None):
        _audit(context["params"], context, self.action, "refused", actor=actor, digest=digest, message=msg)
        raise AirflowFailException(f"REFUSED, no approval requested: {msg}")

    def execute(self, context):
        params, ti = context["params"], context["ti"]
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        if params.get("approval_timeout"):
            self.response_timeout = dt.timedelta(seconds=int(params["approval_timeout"]))
        fleet_file = settings.fleet_file()
        rb = runbook(params, self.action, context)
        record = None
        try:
            cluster = _cluster(params)
            asked_by = _run_requesters(context)
            approvers = require_approvers(cluster, fleet_file)
            plan, digest = plans.load(plans_root(), dag_id, run_id)
            if self.second:
                record = rb.approval()
        except FleetError as e:
            self._refuse(context, str(e))
        if self.second and not (record or {}).get("answer"):
            # the first approval task succeeded without an answer (marked success by hand): nothing to
            # ask a second approver about; execute refuses it from the record, with what XCom claimed
            self.log.warning("the approval record %s holds no first answer: execute will refuse this run",
                             rb.approval_file())
            return None
        earlier = self._earlier_decision(rb, ti)
        if earlier is not None:
            # an earlier try took an answer and audited its decision, then died: the decision stands
            request, event = earlier
            self.log.info("try %s: try %s already decided (%s by %s, audited): not asking again", ti.try_number,
                          request["try_number"], event["chosen_options"][0], _responder(event) or "(timeout)")
            return self._decide(context, event, rb, request)
        earlier_request = self._earlier_request(rb, ti)
        if earlier_request is not None and not getattr(self, "_asking_again", False):
            # an earlier try asked and Airflow failed it (see __init__), perhaps right after a person
            # answered: Airflow's HITL record holds that answer, which only the triggerer can read
            self.log.info("try %s: try %s asked and did not finish; reading the answer Airflow holds for it "
                          "in %.0f s", ti.try_number, earlier_request["try_number"], APPROVAL_SETTLE.total_seconds())
            self.defer(trigger=EarlierAnswerTrigger(str(ti.id), APPROVAL_SETTLE.total_seconds()),
                       method_name="resume_with_earlier_answer")
        if self.second:
            asked_by = tuple(dict.fromkeys(asked_by + tuple(record.get("requested_by") or ())))
            if not needs_second_approver(record, _triggering_user(context)):
                record[SECOND] = {"needed": False}
                rb.write_approval(record)
                self.log.info("triggered by %s: one approval is enough", _triggering_user(context))
                return None
            first = record["answer"]["approver"]
            eligible = [a for a in eligible_approvers(approvers, asked_by) if a != first]
            if not eligible:
                self._refuse(context, f"no person requested this run, so it needs a second approver, and cluster "
                                      f"{cluster.name!r} lists no approver other than {first!r}; add another user to "
                                      f"{fleet_file}: clusters[{cluster.name}].approvers", first, digest)
        else:
            eligible = eligible_approvers(approvers, asked_by)
            if not eligible:
                self._refuse(context, f"every approver of cluster {cluster.name!r} requested this run "
                                      f"({', '.join(asked_by)}): nobody else may approve it; add another user to "
                                      f"{fleet_file}: clusters[{cluster.name}].approvers", ", ".join(asked_by), digest)
        # the title names groups and topics: one line, bidi and zero-width characters shown escaped
        title = f"{self.action.name} on cluster {cluster.name}: {plan['title']}"
        again = "asked again (an earlier request of this run got no answer): " if earlier_request else ""
        self.subject = visible_controls(again + ("second approval (no person requested this run): " if self.second
                                                 else "") + title)[:250]
        self.body = render_plan(self.action, plan, digest, self.response_timeout or DEFAULT_RESPONSE_TIMEOUT)
        self.assigned_users = [{"id": a, "name": a} for a in eligible]
        request = {"ti_id": str(ti.id), "try_number": ti.try_number, "assigned": eligible,
                   "requested_at": dt.datetime.now(dt.timezone.utc).isoformat(), "answer": None}
        notice = self._notice(context, cluster, plan, digest, eligible, asked_by, earlier_request, request)
        if self.second:
            record[SECOND] = {"needed": True, **request}
            rb.write_approval(record)
        else:
            # a new request: an answer recorded by an earlier try no longer counts
            rb.write_approval({"dag_id": dag_id, "run_id": run_id, "digest": digest, "requested_by": list(asked_by),
                               TRIGGERING_USER: _triggering_user(context), **request})
            context["ti"].xcom_push(key="plan_digest", value=digest)  # shown to people; execute never reads it
        self.log.info("waiting for %sapproval of plan %s (may approve: %s; requested by: %s; timeout %s)",
                      "the second " if self.second else "", digest, ", ".join(eligible),
                      (", ".join(asked_by) or "nobody") + ("" if _triggering_user(context) else
                                                           " (no person triggered this run: two approvers needed)"),
                      self.response_timeout)
        # the approvers are told once the request exists (HITLOperator calls its notifiers right after
        # writing it, before the task parks); a notice that fails is logged, never fails the gate
        self.notifiers = [notice] if notice is not None else []
        return super().execute(context)

    def _notice(self, context, cluster: Cluster, plan: dict, digest: str, eligible: list[str],
                asked_by: tuple[str, ...], earlier_request: dict | None, request: dict):
        """The notice that this request waits for an approver, through the fleet file's alert channels
        (``alerts.approval_channels``), with the link to the approval page; None when there is nothing
        to send. Once per wait: a retry that asks again about the same plan (its earlier try's request
        got no answer) does not tell the approvers again, who already hold the link to the same page.
        The request records the notice (``notice``), so no resume or retry sends it twice."""
        told = (earlier_request or {}).get("notice")
        if told:
            request["notice"] = told
            self.log.info("the approvers were told at %s (%s): not again", told.get("at"),
                          ", ".join(told.get("channels") or ()) or "task log only")
            return None
        try:
            from fleetkit.core.alerts import approval_notice, dedup_key

            alert_settings = load_fleet(settings.fleet_file()).alerts
            dag_id, run_id, task_id = context["dag"].dag_id, context["run_id"], context["ti"].task_id
            title, lines = approval_notice(self.action.name, cluster.name, plan["title"], digest, eligible,
                                           list(asked_by), _human(self.response_timeout or DEFAULT_RESPONSE_TIMEOUT),
                                           second=self.second, asked_again=earlier_request is not None)
            notice = ApprovalNotice(title=title, lines=lines, settings=alert_settings,
                                    link=approval_page_url(dag_id, run_id, task_id),
                                    link_text="Approve or reject in Airflow", approval=True,
                                    key=dedup_key("approval", dag_id, run_id, task_id),
                                    details={"cluster": cluster.name, "plan_digest": digest})
        except Exception as e:  # noqa: BLE001 - a notice never fails the gate
            self.log.error("the approvers are not told (%s: %s); they find the request under Browse > "
                           "Required Actions", type(e).__name__, visible_controls(str(e))[:300])
            return None
        request["notice"] = {"at": dt.datetime.now(dt.timezone.utc).isoformat(), "channels": list(notice.channels())}
        return notice

    def _request(self, rb: Runbook) -> tuple[dict | None, dict]:
        """(the approval record, this task's request in it)."""
        try:
            record = rb.approval()
        except FleetError:
            return None, {}
        return record, (((record or {}).get(SECOND) if self.second else record) or {})

    def _earlier_request(self, rb: Runbook, ti) -> dict | None:
        """The request an earlier try of this task instance wrote about the plan stored now, if the
        record holds one (Airflow 3.1 gives each try its own task instance id, 3.3 keeps one: the try
        number tells them apart). A request about another plan (the run was cleared and planned
        again) is not this one's: the new plan is asked about."""
        record, request = self._request(rb)
        if ti.try_number <= 1 or not request.get("ti_id"):
            return None
        if not isinstance(request.get("try_number"), int) or not 0 < request["try_number"] < ti.try_number:
            return None
        if record.get("dag_id") != rb.dag_id or record.get("run_id") != rb.run_id:
            return None
        try:
            _, digest_now = plans.load(rb.plans_root, rb.dag_id, rb.run_id)
        except FleetError:
            return None
        return request if record.get("digest") == digest_now else None

    def _earlier_decision(self, rb: Runbook, ti) -> tuple[dict, dict] | None:
        """(request, answer event) when an earlier try of this task took an answer and audited its
        decision (a keyed audit record names that request), else None. That decision stands: a
        retried or cleared approval task does not ask again. An answer only the approval record
        holds is never taken: the record is a file in the data root."""
        request = self._earlier_request(rb, ti)
        answer = (request or {}).get("answer")
        if not (isinstance(answer, dict) and answer.get("audited") and answer.get("try_number") == request["try_number"]):
            return None
        decision = "approved" if (answer.get("chosen_options") or [None])[0] == self.APPROVE else "rejected"
        if not any(r["event"] == decision and (r.get("details") or {}).get("request") == request["ti_id"]
                   and (r.get("details") or {}).get("try_number") == request["try_number"] for r in rb.history()):
            return None
        event = _event_of(answer)
        return (request, event) if event is not None else None

    def resume_with_earlier_answer(self, context, event):
        """Resumed by EarlierAnswerTrigger: decide from the answer Airflow's HITL record held for the
        earlier try's request, or ask again when it held none."""
        rb = runbook(context["params"], self.action, context)
        request = self._earlier_request(rb, context["ti"])
        event = event if isinstance(event, dict) else {}
        if event.get("answered") and request is not None:
            answer = _event_of({**event, "timedout": event.get("responded_by_user") is None})
            if answer is not None:
                self.log.info("try %s: taking the answer %s gave the request of try %s (Airflow's record of it): "
                              "not asking again", context["ti"].try_number, _responder(answer) or "(timeout)",
                              request["try_number"])
                return self._decide(context, answer, rb, request)
        self.log.info("try %s: no answer to the earlier request (%s): asking again", context["ti"].try_number,
                      event.get("why") or "the approval record changed")
        self._asking_again = True
        return self.execute(context)

    def execute_complete(self, context, event):
        rb = runbook(context["params"], self.action, context)
        _, request = self._request(rb)
        if request.get("ti_id") != str(context["ti"].id) or request.get("try_number") != context["ti"].try_number:
            request = None  # not this try's request: _decide refuses
        return self._decide(context, event, rb, request)

    def _decide(self, context, event, rb: Runbook, request: dict | None):
        """Record the answer `event` gave `request` (this try's, or an earlier try's: see
        resume_with_earlier_answer), check it (rb.approved), audit the decision once, and finish as Airflow's
        ApprovalOperator does (Reject skips what follows)."""
        event = event if isinstance(event, dict) else {}
        chosen = list(event.get("chosen_options") or [])
        approver = _responder(event)
        timedout = bool(event.get("timedout")) or ("error" in event and event.get("error_type") == "timeout")
        actor = approver or ("timeout" if timedout else None)
        record, held = self._request(rb)
        if record is None or request is None or held.get("ti_id") != request.get("ti_id") \
                or held.get("try_number") != request.get("try_number"):
            # the request this answer belongs to is gone or was replaced: nothing to trust
            rb.audit("refused", actor=actor or "unknown",
                     message=f"the approval record {rb.approval_file()} does not hold this task's request")
            raise AirflowFailException("REFUSED: the approval record does not hold this task's request")
        answer = held.get("answer")
        if not (isinstance(answer, dict) and answer.get("audited")):
            responded_at = event.get("responded_at")
            user = user_dict(event.get("responded_by_user"))
            answer = held["answer"] = {
                "chosen_options": chosen, "approver": approver, "responded_by_user": user or None,
                "responded_at": responded_at.isoformat() if hasattr(responded_at, "isoformat") else responded_at,
                "timedout": timedout, "try_number": held["try_number"]}
            if context["ti"].try_number != held["try_number"]:
                answer["taken_by_try"] = context["ti"].try_number
            rb.write_approval(record)
        choice = chosen[0] if chosen else "?"
        if choice == self.APPROVE:
            # "approved" is recorded only for an answer the engine accepts (a listed approver who did
            # not request the run, for the stored plan; a second one where no person requested it):
            # anything else is a refusal, and final
            try:
                rb.approved(requested_by=_run_requesters(context), actor=actor or "unknown", require_second=self.second,
                            triggering_user=_triggering_user(context))
            except Refused as e:
                raise AirflowFailException(f"REFUSED: {e}") from None
        if not answer.get("audited"):
            decided = "approved" if choice == self.APPROVE else "rejected"
            rb.audit(decided, actor=actor or "unknown", digest=record["digest"],
                     message=f"{'second approval: ' if self.second else ''}{choice} by {actor or 'unknown'}"
                             + (" (no answer before the timeout)" if approver is None else ""),
                     details={"request": held["ti_id"], "try_number": held["try_number"]})
            answer["audited"] = True
            rb.write_approval(record)
        try:
            return super().execute_complete(context, event)
        except (HITLTriggerEventError, ValueError) as e:  # a timeout or a bad answer: final, never asked again
            raise AirflowFailException(f"{type(e).__name__}: {e}") from None


class ApprovalNotice(FleetAlertNotifier):
    """The notice that an approval waits: whatever happens while it is sent, the approval task goes
    on waiting (a channel that fails is logged by FleetAlertNotifier, anything else here)."""

    def notify(self, context) -> None:
        try:
            super().notify(context)
        except Exception as e:  # noqa: BLE001 - never fails the gate
            self.log.error("the approval notice was not sent: %s", type(e).__name__)


def _responder(event: dict) -> str | None:
    user = user_dict((event or {}).get("responded_by_user"))
    return user.get("name") or user.get("id")


def _event_of(answer: dict) -> dict | None:
    """The resume event an answer recorded in the approval record stands for, None when malformed."""
    chosen = answer.get("chosen_options")
    if not isinstance(chosen, list) or not chosen or not all(isinstance(c, str) for c in chosen):
        return None
    responded_at = answer.get("responded_at")
    try:
        responded_at = dt.datetime.fromisoformat(responded_at) if responded_at else None
    except (TypeError, ValueError):
        return None
    return {"chosen_options": chosen, "params_input": {}, "responded_at": responded_at,
            "responded_by_user": answer.get("responded_by_user"), "timedout": bool(answer.get("timedout"))}


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
            _audit(params, context, action, "refused", actor=", ".join(asked_by) or None, message=str(e))
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
        for line in plan.get("refused_now") or []:  # named before anyone approves, on the page and here
            log.warning("refused if approved now: %s", visible_controls(line))
        # who asked, as Airflow recorded it (the triggering user; a run started for someone names them):
        # "planned by -" only for a run no person triggered
        _audit(params, context, action, "planned", actor=", ".join(asked_by) or None, digest=digest,
               message=plan["title"], details={"changes": plan["changes"]})
        # the XCom goes into the metadata database: a name from the cluster in the title with a NUL
        # (PostgreSQL's JSONB refuses it) or a control character is shown escaped, as in the logs
        return {"digest": digest, "title": visible_controls(plan["title"]), "changes": len(plan["changes"]),
                "refused_now": len(plan.get("refused_now") or [])}

    @task.short_circuit(task_id="dry_run_stop")
    def dry_run_stop(**context) -> bool:
        params = context["params"]
        if params.get("dry_run", True):
            _, digest = plans.load(plans_root(), context["dag"].dag_id, context["run_id"])
            _audit(params, context, action, "dry_run", digest=digest,
                   message="dry run: plan rendered, nothing executed (trigger again with dry_run false to execute)")
            log.info("dry run: stopping after the plan; nothing will change")
            return False
        return True

    approve = PlanApprovalOperator(task_id="approve", action=action, response_timeout=response_timeout)
    approve_second = PlanApprovalOperator(task_id="approve_second", action=action, second=True,
                                          response_timeout=response_timeout)

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
            rb = runbook(params, action, context)
            lock = _with_cluster(params, lambda ctx: rb.lock(ctx.cluster, ctx.kafka, ctx.zk, owner, holder_running))
        except FleetError as e:
            _audit(params, context, action, "refused", message=str(e))
            raise AirflowFailException(str(e)) from None
        ti.xcom_push(key="lock_identity", value=lock.identity)
        log.info("locked cluster %s (%s) for %s: %s", params["cluster"], lock.identity, owner, lock.path)
        return owner

    @task(task_id="execute")
    def execute_task(**context) -> dict:
        params = context["params"]
        rb = runbook(params, action, context)
        try:
            answered = bool((rb.approval() or {}).get("answer"))
        except FleetError:
            answered = True  # unreadable: the engine refuses it and says why
        # no answer (an approval task marked success by hand): what its XCom claimed, for the record
        evidence = {} if answered else {"approval_record": str(rb.approval_file()), "xcom_claimed": json.loads(
            json.dumps(context["ti"].xcom_pull(task_ids="approve"), default=str))}
        # every change first checks that this run still holds the cluster's lock (an operator may have
        # cleared it): the lock task named the identity it locked
        try:
            result = rb.execute_approved(
                action, lambda fn: _with_cluster(params, fn, journal_path=str(rb.journal), changes=True),
                context["ti"].xcom_pull(task_ids="lock", key="lock_identity"),
                f"{context['dag'].dag_id}/{context['run_id']}", requested_by=_run_requesters(context),
                triggering_user=_triggering_user(context), details=evidence)
        except Refused as e:
            raise AirflowFailException(f"REFUSED, nothing executed: {e}") from None
        except FleetError as e:
            raise AirflowFailException(str(e)) from None
        # the result for verify in a file beside the plan; the XCom only says where (what the
        # cluster said, NUL included, never goes into the metadata database)
        path = plans.store_result(plans_root(), context["dag"].dag_id, context["run_id"], result)
        return {"result_file": str(path)}

    @task(task_id="verify")
    def verify_task(**context) -> str:
        params = context["params"]
        result = plans.load_result(plans_root(), context["dag"].dag_id, context["run_id"])
        try:
            runbook(params, action, context).verify_executed(action, lambda fn: _with_cluster(params, fn), result)
        except VerifyFailed as e:
            raise AirflowFailException(str(e)) from None
        return "verified"

    @task(task_id="cleanup")
    def cleanup_task(**context) -> list[str]:
        """Teardown: record an execute that started and never finished, then the action's teardown."""
        params = context["params"]
        rb = runbook(params, action, context)
        return rb.clean_up(action, lambda fn: _with_cluster(params, fn, journal_path=str(rb.journal), changes=True))

    @task(task_id="unlock")
    def unlock_task(**context) -> bool:
        # the identity the lock task took (no need to reach the cluster again); none: never locked
        owner = f"{context['dag'].dag_id}/{context['run_id']}"
        identity = context["ti"].xcom_pull(task_ids="lock", key="lock_identity")
        if not identity:
            log.info("this run holds no lock (the lock task did not take it)")
            return False
        released = runbook(context["params"], action, context).release_lock(identity, owner)
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
    planned >> stop >> approve >> approve_second >> lock >> executed >> verified >> cleanup.as_teardown(setups=lock)
    cleanup >> unlock.as_teardown(setups=lock)
    return planned, unlock
