"""The runbook engine: the one place every change to a cluster passes, whoever starts it.

The approval gate in the Airflow UI, the unattended creator of missing group-id mappings and the
``fleetctl`` commands that change a cluster or its records (``trim resume|restore``, ``lock
clear``) all go through a ``Runbook`` (one run of one action on one cluster), so no caller can
skip a check:

* who may approve: the cluster's ``approvers`` from the deployment's fleet file, never a requester
  of the run (``requesters``, ``eligible_approvers``, ``approver_problem``);
* the approval record (``approval.json`` beside the stored plan, written only by the approval
  task from Airflow's HITL answer) and its eligibility check (``Runbook.approved``): an answer,
  Approve, an eligible approver, the stored plan's digest, and no ``refused`` / ``rejected``
  record of the run in the audit: a refusal is final on every path;
* the per-cluster lock (``Runbook.lock``: keyed by the cluster's identity, a holder run that no
  longer runs is reported, never taken over);
* the execution journal (``Runbook.journal``: one per capability and run, intent before each change,
  outcome after) and the gate's own entry in it (``GATE_SEQ``: execute started / ended), which
  tells whether execute started and was interrupted (``Runbook.execute_state``);
* the audit chain (``Runbook.audit``: fleetkit.core.audit).

The lock, the journal and the audit heads live in the process's shared-state store
(fleetkit.core.state: local files, or the deployment's PostgreSQL when FLEET_STATE_CONN_ID is set).
Deployment settings (fleet file, data root, lock folder) come from the deployment
(fleetkit.core.settings), never from a trigger's params or a command's arguments.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fleetkit.core import audit
from fleetkit.core import journal as core_journal
from fleetkit.core import plans, settings
from fleetkit.core.datasets import DataRoot
from fleetkit.core.durable import replace_file
from fleetkit.core.errors import FleetConfigError, FleetError
from fleetkit.core.fleet import Cluster, load_fleet
from fleetkit.core.locks import ClusterLock

APPROVE = "Approve"
REQUESTED_BY = "requested_by"
GATE_SEQ = "gate"  # the gate's own journal entry: execute started (intent) / ended (done, failed)
FINAL_EVENTS = ("refused", "rejected")  # once recorded for a run, nothing of it is ever executed

log = logging.getLogger(__name__)


class VerifyFailed(FleetError):
    """The cluster does not read back what the executed plan said; audited `verify_failed`."""


class Refused(FleetError):
    """A check of the engine said no; the refusal is already in the audit. `details`: why, as data."""

    def __init__(self, msg: str, details: dict | None = None):
        super().__init__(msg)
        self.details = details or {}


# -- who may approve (pure) ------------------------------------------------------------------------
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


SECOND = "second"  # the approval record's second request and answer (a run no person requested)


TRIGGERING_USER = "triggering_user"  # the approval record's copy of the user Airflow recorded


def needs_second_approver(record: dict | None, triggering_user: str | None = None) -> bool:
    """A run no person triggered (started by an asset event, a scheduled DAG, another DAG: Airflow
    recorded no triggering user) needs two approvers. Decided only from what Airflow recorded (the
    run's triggering user, or the approval record's copy of it the approval task wrote): a conf's
    `requested_by` names someone who may not approve, it never stands in for a person's request, so
    a made-up name cannot waive the second approval."""
    return not (triggering_user or (record or {}).get(TRIGGERING_USER))


def answer_problem(record: dict | None, approvers: tuple[str, ...], requested_by: tuple[str, ...], cluster: str,
                   fleet_file: str, digest_now: str, require_second: bool = True,
                   triggering_user: str | None = None) -> tuple[str, dict] | None:
    """Why an approval record does not approve the stored plan (digest_now), or None: no answer
    from Airflow's HITL record, an answer that is not Approve, an approver who requested the run
    (the record's requesters count too) or is not listed, a plan changed since it was approved;
    for a run no person requested (`require_second`), no second Approve by another listed approver."""
    record = record or {}
    answer = record.get("answer") or {}
    if not answer:
        return ("the approval task recorded no answer from Airflow's HITL record of this run (an approval task "
                "marked success by hand, or its answer never reached it): nothing was approved", {})
    chosen = answer.get("chosen_options") or []
    if chosen != [APPROVE]:
        return f"the approval task did not answer Approve (answer: {chosen or 'none'})", {"chosen": chosen}
    asked = tuple(dict.fromkeys(tuple(requested_by) + tuple(record.get("requested_by") or ())))
    problem = approver_problem(answer.get("approver"), approvers, asked, cluster, fleet_file)
    if problem:
        return problem, {"approver": answer.get("approver"), "requested_by": list(asked), "approvers": list(approvers)}
    if record.get("digest") != digest_now:
        return (f"the stored plan changed after approval: approved {record.get('digest')}, stored plan is now "
                f"{digest_now}. Re-run the runbook to plan and approve again.",
                {"approved_digest": record.get("digest"), "stored_digest": digest_now})
    if require_second and needs_second_approver(record, triggering_user):
        second = (record.get(SECOND) or {}).get("answer") or {}
        first = answer.get("approver")
        if not second:
            return ("no person triggered this run (started by an asset event, a scheduled DAG or another DAG), so it needs a "
                    f"second approver, and the approval record holds no second answer (only {first!r} approved)",
                    {"approver": first})
        if (second.get("chosen_options") or []) != [APPROVE]:
            return (f"the second approval task did not answer Approve (answer: {second.get('chosen_options') or 'none'})",
                    {"approver": first, "second_approver": second.get("approver")})
        if second.get("approver") == first:
            return (f"{first!r} answered both approvals: a run no person triggered needs two different approvers",
                    {"approver": first, "second_approver": second.get("approver")})
        problem = approver_problem(second.get("approver"), approvers, asked, cluster, fleet_file)
        if problem:
            return f"second approver: {problem}", {"approver": first, "second_approver": second.get("approver")}
    return None


# -- the approval record (beside the plan; written only by the approval task) -----------------------
def approval_path(plans_root: str, dag_id: str, run_id: str) -> Path:
    return plans.plan_path(plans_root, dag_id, run_id).with_name("approval.json")


def read_approval(plans_root: str, dag_id: str, run_id: str) -> dict | None:
    path = approval_path(plans_root, dag_id, run_id)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise FleetError(f"approval record {path} is not valid JSON: {e}") from None


def write_approval(plans_root: str, dag_id: str, run_id: str, record: dict) -> Path:
    return replace_file(approval_path(plans_root, dag_id, run_id),
                        json.dumps(record, sort_keys=True, default=str).encode("utf-8"))


# -- one run --------------------------------------------------------------------------------------
@dataclass
class Runbook:
    """One run (`dag_id`, `run_id`) of one action (`action`, of `capability`) on one fleet-file
    cluster. The deployment's settings unless given (tests give folders of their own)."""

    capability: str
    action: str
    dag_id: str
    run_id: str
    cluster: str
    data_root: str = field(default_factory=settings.data_root)
    fleet_file: str = field(default_factory=settings.fleet_file)
    lock_dir: str = field(default_factory=settings.lock_dir)

    # where things are
    @property
    def plans_root(self) -> str:
        return settings.plans_root(self.data_root)

    @property
    def root(self) -> DataRoot:
        return DataRoot(self.data_root)

    @property
    def journal(self) -> Path:
        """<data root>/journals/<capability>/<dag>/<run>/<cluster>.jsonl: one folder per capability,
        whichever path (the gate, an unattended task, the CLI) changed the cluster. A run journaled
        before that (under the action's name) is still found there."""
        path = core_journal.journal_path(self.data_root, self.capability, self.dag_id, self.run_id, self.cluster)
        legacy = core_journal.journal_path(self.data_root, self.action, self.dag_id, self.run_id, self.cluster)
        if self.action != self.capability and not core_journal.exists(path) and core_journal.exists(legacy):
            return legacy
        return path

    def fleet_cluster(self) -> Cluster:
        return load_fleet(self.fleet_file).cluster(self.cluster)

    # the audit
    def audit(self, event: str, actor: str | None = None, digest: str | None = None, message: str = "",
              details: dict | None = None) -> dict:
        return audit.record(self.root, cluster=self.cluster, dag_id=self.dag_id, run_id=self.run_id,
                            action=self.action, event=event, actor=actor, digest=digest, message=message,
                            details=details)

    def refuse(self, msg: str, actor: str | None = None, digest: str | None = None,
               details: dict | None = None, final: bool = True) -> Refused:
        """Audit a refusal and return the exception to raise. A final refusal (the default: a decision
        on the run's approval or execution) ends the run for good on every path; a command outside
        the run that was refused (`final` False: e.g. a resume asked too early) changes nothing of it."""
        self.audit("refused", actor=actor, digest=digest, message=msg,
                   details={**(details or {}), **({} if final else {"final": False})})
        return Refused(msg, details)

    def history(self) -> list[dict]:
        """This run's audit records that the toolkit wrote (keyed, their HMAC verified:
        audit.authentic), oldest first. A row without a hash or a key (written into the data root by
        hand, or dated before the chain) never counts as an approval, a refusal or an execution."""
        return [r for r in audit.authentic_records(self.root, self.cluster, self.run_id) if r["dag_id"] == self.dag_id]

    def final_refusal(self, history: list[dict] | None = None) -> dict | None:
        """The first final `refused` / `rejected` record of this run, if any: a refusal is final."""
        return next((r for r in (self.history() if history is None else history)
                     if r["event"] in FINAL_EVENTS and (r["details"] or {}).get("final", True)), None)

    # the approval
    def approval(self) -> dict | None:
        return read_approval(self.plans_root, self.dag_id, self.run_id)

    def write_approval(self, record: dict) -> Path:
        return write_approval(self.plans_root, self.dag_id, self.run_id, record)

    def approval_file(self) -> Path:
        return approval_path(self.plans_root, self.dag_id, self.run_id)

    def approved(self, requested_by: tuple[str, ...] = (), actor: str | None = None,
                 check_audit: bool = False, verify_chain: bool = False, final: bool = True,
                 details: dict | None = None, require_second: bool = True,
                 triggering_user: str | None = None) -> tuple[dict, str, str]:
        """(plan, digest, approver) when the stored plan is approved for this run, else Refused (audited,
        with `actor`, or the approver the record names): the approval record answers Approve by a
        listed approver who requested nothing, for the stored plan's digest. With `check_audit`, also:
        the audit holds the `approved` record of this run by that approver for that digest, and no
        final `refused` / `rejected` record of the run; with `verify_chain` (the paths outside the
        approval gate's own run), the cluster's audit chain verifies first. `final`: whether a
        refusal here ends the run (see `refuse`); `details` go into a refusal's audit record."""
        extra = details or {}
        try:
            record = self.approval()
        except FleetError as e:
            raise self.refuse(str(e), actor=actor or "unknown", final=final, details=extra) from None
        answer = (record or {}).get("answer") or {}
        who = actor or answer.get("approver") or "unknown"
        approved_digest = (record or {}).get("digest")
        try:
            cluster = self.fleet_cluster()
            approvers = require_approvers(cluster, self.fleet_file)
            plan, digest_now = plans.load(self.plans_root, self.dag_id, self.run_id)
        except FleetError as e:
            raise self.refuse(str(e), actor=who, digest=approved_digest, final=final, details=extra) from None
        if record is None:
            raise self.refuse(f"run {self.run_id!r} of {self.dag_id} on cluster {self.cluster!r} was never approved: no "
                              f"approval record {self.approval_file()}", actor=who, digest=digest_now, final=final,
                              details=extra)
        problem = answer_problem(record, approvers, requested_by, cluster.name, self.fleet_file, digest_now,
                                 require_second, triggering_user)
        if problem:
            raise self.refuse(problem[0], actor=who, digest=approved_digest, final=final,
                              details={**extra, **problem[1], "approval_record": str(self.approval_file())})
        if verify_chain:
            rep = audit.verify_chain(self.root, self.cluster)
            if not rep.ok:
                raise self.refuse(f"the audit chain of cluster {self.cluster!r} does not verify ({len(rep.problems)} "
                                  f"problem(s), first: {rep.problems[0][1]}): see `fleetctl audit verify --cluster "
                                  f"{self.cluster}`; nothing done", actor=who, digest=digest_now, final=final,
                                  details=extra)
        if check_audit or verify_chain:
            history = self.history()
            refusal = self.final_refusal(history)
            if refusal is not None:
                raise self.refuse(f"run {self.run_id!r} of {self.dag_id} was {refusal['event']} "
                                  f"({audit.iso_z(refusal['observed_at'])} by {refusal['actor'] or '-'}: "
                                  f"{refusal['message']}): a refusal is final; plan and approve a new run",
                                  actor=who, digest=digest_now, details={**extra, "refusal_record": refusal["record_id"]},
                                  final=final)
            approvers_of_record = [answer["approver"]]
            if require_second and needs_second_approver(record, triggering_user):
                approvers_of_record.append(record[SECOND]["answer"]["approver"])
            for name in approvers_of_record:
                if not any(r["event"] == "approved" and r["digest"] == digest_now and r["actor"] == name
                           for r in history):
                    raise self.refuse(f"the audit of cluster {self.cluster!r} holds no 'approved' record of run "
                                      f"{self.run_id!r} by {name!r} for plan {digest_now}: the approval "
                                      "record and the audit disagree; nothing done", actor=who, digest=digest_now,
                                      final=final, details=extra)
        return plan, digest_now, answer["approver"]

    # the journal
    def execute_state(self) -> str | None:
        """What the gate's journal entry says of execute: None (never started), "intent" (started,
        never finished: killed or lost), "failed" (raised), "done"."""
        entry = core_journal.read_journal(self.journal).get(GATE_SEQ)
        return entry["status"] if entry else None

    def open_journal(self) -> core_journal.Journal:
        return core_journal.Journal(self.journal)

    # the lock
    def lock(self, cluster: Cluster, kafka, zk, owner: str,
             holder_running: Callable[[str, str], object] | None = None, kind: str = "airflow") -> ClusterLock:
        """Take the cluster's lock for `owner` (keyed by the cluster's identity); ClusterLocked
        (a FleetError naming the holder and how to clear it) when another run holds it. `kind`:
        "cli" for a fleetctl process (ClusterLock.acquire)."""
        lock = ClusterLock.for_cluster(self.lock_dir, cluster, kafka, zk)
        lock.acquire(owner, self.dag_id, self.run_id, holder_running=holder_running, kind=kind)
        return lock

    def under_lock(self, identity: str, owner: str):
        """A context in which every change journaled for this run first checks that `owner` still
        holds the lock of cluster identity `identity` (LockLost before the next change otherwise)."""
        lock = ClusterLock(self.lock_dir, identity, self.cluster)
        return core_journal.guarded(self.journal, lambda: lock.check_held(owner))

    @contextmanager
    def holding(self, cluster: Cluster, kafka, zk, owner: str,
                holder_running: Callable[[str, str], object] | None = None, kind: str = "airflow"):
        """A change made by one process from start to end (the unattended creator, fleetctl): take
        the cluster's lock for `owner`, hold it (every change journaled for the run first checks it
        is still `owner`'s: under_lock), release it whatever happens. Yields the lock. The gate
        takes and releases the lock in tasks of their own (lock, unlock) and holds it in execute
        with under_lock."""
        lock = self.lock(cluster, kafka, zk, owner, holder_running, kind=kind)
        try:
            with self.under_lock(lock.identity, owner):
                yield lock
        finally:
            lock.release(owner)

    # the execution
    def execute(self, change: Callable[[], object], actor: str | None, digest: str | None,
                rollback: dict | None = None):
        """The execute step of an approved plan: its journal entry (GATE_SEQ: intent before
        `change()`, done or failed after; an intent left alone means it was killed, which the
        gate's cleanup records) and, when `change` raises, the audit's `failed` record with what
        the journal says was made and how to roll it back. Re-raises; returns change's result (the
        caller audits the success with it)."""
        path = self.journal
        with core_journal.Journal(path) as j:
            j.intent(GATE_SEQ, step="execute", actor=actor, digest=digest)
        try:
            out = change()
        except Exception as e:
            with core_journal.Journal(path) as j:
                j.outcome(GATE_SEQ, "failed", error=f"{type(e).__name__}: {e}")
            account = core_journal.summary(path)
            self.audit("failed", actor=actor, digest=digest,
                       message=f"execute failed after {len(account['done'])} change(s) made, "
                               f"{len(account['unknown'])} of unknown outcome: {type(e).__name__}: {e}",
                       details={"journal": account, "rollback": rollback})
            raise
        with core_journal.Journal(path) as j:
            j.outcome(GATE_SEQ, "done")
        return out

    # the run's steps after its approval, in order; the adapter (the gate's tasks) only wires them.
    # `connect(fn)` runs fn(ClusterContext) over the cluster's connections (the runbook principal's
    # for execute and cleanup, the read-only one's for verify).
    def execute_approved(self, action, connect: Callable, identity: str | None, owner: str,
                         requested_by: tuple[str, ...] = (), triggering_user: str | None = None,
                         details: dict | None = None) -> dict:
        """Execute an approved plan: the approval (`approved`, with the audit), this run's hold on the
        lock taken by the lock step (`identity`, `under_lock`), the preconditions re-checked on the
        cluster right before acting (action.check), the change (`execute`: its journal entry and a
        failure's audit), then the audit's `executed`. Refused (audited) when a check says no; returns
        the change's result."""
        plan, digest, actor = self.approved(requested_by=requested_by, check_audit=True,
                                            triggering_user=triggering_user, details=details)
        if not identity:
            raise self.refuse("the lock task recorded no lock identity: this run does not hold the cluster's lock",
                              actor=actor, digest=digest)

        def run(ctx) -> dict:
            problems = action.check(ctx, plan)
            if problems:
                raise self.refuse("preconditions no longer hold: " + "; ".join(problems), actor=actor, digest=digest,
                                  details={"problems": problems})
            log.info("preconditions hold; executing %s approved by %s (plan %s); journal %s", action.name, actor,
                     digest, self.journal)
            return self.execute(lambda: action.execute(ctx, plan), actor=actor, digest=digest,
                                rollback=plan["rollback"])

        with self.under_lock(identity, owner):
            result = connect(run)
        self.audit("executed", actor=actor, digest=digest, message=f"executed, approved by {actor}",
                   details={"result": result, "rollback": plan["rollback"]})
        return result

    def verify_executed(self, action, connect: Callable, result) -> None:
        """Read the cluster back against the plan (action.verify): the audit's `verified`, or its
        `verify_failed` and VerifyFailed naming the problems."""
        plan, digest = plans.load(self.plans_root, self.dag_id, self.run_id)
        problems = connect(lambda ctx: action.verify(ctx, plan, result))
        if problems:
            self.audit("verify_failed", digest=digest, message="; ".join(problems),
                       details={"problems": problems, "rollback": plan["rollback"]})
            raise VerifyFailed("verification failed: " + "; ".join(problems))
        self.audit("verified", digest=digest, message="verified: the cluster reads back the plan")

    def clean_up(self, action, connect: Callable) -> list[str]:
        """After execute, whatever happened to it: an execute that started and never finished (its
        journal entry left at intent: killed or lost) is audited `interrupted` with what the journal
        says was made; then the action's teardown (audited when it did something). Nothing when
        execute never started."""
        state = self.execute_state()
        if state is None:
            log.info("execute never started: nothing to clean up")
            return []
        plan, digest = plans.load(self.plans_root, self.dag_id, self.run_id)
        if state == "intent":
            entry = core_journal.read_journal(self.journal)[GATE_SEQ]
            account = core_journal.summary(self.journal)
            self.audit("interrupted", actor=entry.get("actor"), digest=digest,
                       message=f"execute started and never finished (killed or lost): {len(account['done'])} "
                               f"change(s) made, {len(account['unknown'])} of unknown outcome; see the journal "
                               f"{self.journal}", details={"journal": account, "rollback": plan["rollback"]})
        done = connect(lambda ctx: action.teardown(ctx, plan))
        if done:
            self.audit("teardown", digest=digest, message="; ".join(done), details={"done": done})
        return done

    def release_lock(self, identity: str, owner: str) -> bool:
        """Release the lock of a cluster identity taken by `owner` (no need to reach the cluster)."""
        return ClusterLock(self.lock_dir, identity, self.cluster).release(owner)


def run_state_problem(state: str | None, what: str, force: bool, unknown_run_ok: bool = False) -> str | None:
    """Why a command outside Airflow may not act on a run in Airflow `state` (None: Airflow could not
    be asked), or None. A run that is queued or running is never acted on; a run Airflow does not know
    ("no such run") is never acted on either (`unknown_run_ok`: a command that only frees what such a
    run left, a lock); an unknown state needs `force` (the operator checked the run another way)."""
    from fleetkit.core.locks import RUNNING_STATES

    if state in RUNNING_STATES:
        return f"{what}: its Airflow run is still {state}; wait for it to end (or mark it failed in Airflow) first"
    if state == "no such run" and not unknown_run_ok:
        return (f"{what}: Airflow has no such run: only a run Airflow started and recorded is acted on; nothing "
                "done")
    if state is None and not force:
        return (f"{what}: whether its Airflow run still runs could not be told (Airflow not reachable); check the run "
                "in the Airflow UI, then add --force")
    return None
