"""Finishing or undoing a trim outside Airflow (`fleetctl trim resume|restore RUN`): the run's
stored plan, the proof it was approved, and its execution journal, all checked by the runbook
engine (fleetkit.core.runbook), as the gate checks them.

Both act only on a plan that was approved and never refused: the run's approval record answers
Approve by a listed approver who did not request the run, for the stored plan's digest (an edited
plan has another digest); the cluster's audit chain verifies and holds that `approved` record and
no `refused` / `rejected` one. Resume acts only on a run whose execute started and was
interrupted (killed, or failed); restore on a run whose execute started. Both are dry runs unless
told to execute; the caller also checks that the Airflow run no longer runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleetkit.core import journal, plans, settings
from fleetkit.core.action import ClusterContext  # noqa: F401 (for the CLI)
from fleetkit.core.errors import FleetError
from fleetkit.core.runbook import Runbook
from fleetkit.trim import execute, verify
from fleetkit.trim.plan import ACTION

DAG_ID = "runbook_trim"
CAPABILITY = "trim"

#: what the gate's journal entry must say of execute for each command
ACTS_ON = {"resume": ("intent", "failed"), "restore": ("intent", "failed", "done")}
_SAID = {None: "never started", "intent": "started and never finished (killed or lost)", "done": "finished",
         "failed": "failed"}


@dataclass
class ApprovedRun:
    dag_id: str
    run_id: str
    plan: dict
    digest: str
    approver: str
    journal: Path
    runbook: Runbook

    @property
    def cluster(self) -> str:
        return self.plan["cluster"]


def runbook(run_id: str, dag_id: str = DAG_ID, data_root: str | None = None) -> Runbook:
    """The engine's view of a trim run (the deployment's settings; the cluster from the stored plan)."""
    data_root = data_root or settings.data_root()
    plan, _ = plans.load(settings.plans_root(data_root), dag_id, run_id)
    if plan.get("action") != ACTION:
        raise FleetError(f"run {run_id!r} of {dag_id}: the stored plan is a {plan.get('action')!r} plan, not {ACTION}")
    return Runbook(capability=CAPABILITY, action=ACTION, dag_id=dag_id, run_id=run_id, cluster=plan["cluster"],
                   data_root=data_root)


def approved_run(rb: Runbook, what: str, actor: str) -> ApprovedRun:
    """The run, when the engine finds it approved and never refused and its execute is in a state
    `what` ("resume" or "restore") acts on; else Refused (audited, not final for the run)."""
    plan, digest, approver = rb.approved(actor=actor, verify_chain=True, final=False)
    state = rb.execute_state()
    if state not in ACTS_ON[what]:
        raise rb.refuse(f"fleetctl trim {what} of run {rb.run_id!r}: its execute step {_SAID.get(state, state)}; "
                        f"{what} acts only on a run whose execute " +
                        ("started and was interrupted (killed or failed)" if what == "resume" else "started"),
                        actor=actor, digest=digest, final=False, details={"execute_state": state})
    return ApprovedRun(rb.dag_id, rb.run_id, plan, digest, approver, rb.journal, rb)


#: how long an approval of a finished trim's restore stays good
RESTORE_APPROVAL_HOURS = 4


def restore_approval_problem(run: ApprovedRun, actor: str, now=None) -> str | None:
    """Why `actor` may not restore this run now, or None. A trim whose execute finished (or was
    finished by `fleetctl trim resume`) changed the cluster as approved; putting its files back is another change, so it needs an approval of its
    own: an `restore_approved` audit record (signed: audit.authentic) of this run and plan, by a
    listed approver of the cluster other than `actor`, at most RESTORE_APPROVAL_HOURS old. An
    interrupted run (execute started, never finished) is restored under its own approval."""
    import datetime as dt

    from fleetkit.core.runbook import require_approvers

    history = run.runbook.history()
    if run.runbook.execute_state() != "done" and not any(r["event"] == "resumed" for r in history):
        return None  # interrupted and not finished since: its own approval covers putting it back
    approvers = require_approvers(run.runbook.fleet_cluster(), run.runbook.fleet_file)
    now = now or dt.datetime.now(dt.timezone.utc)
    oldest = now - dt.timedelta(hours=RESTORE_APPROVAL_HOURS)
    good = [r for r in history if r["event"] == "restore_approved" and r["digest"] == run.digest
            and r["actor"] in approvers and r["actor"] != actor and r["observed_at"] >= oldest]
    if good:
        return None
    return (f"run {run.run_id!r} finished its trim: restoring it changes the cluster again, so it needs its own "
            f"approval by a listed approver of cluster {run.cluster!r} other than {actor!r} ({', '.join(approvers)}), "
            f"given within the last {RESTORE_APPROVAL_HOURS} h: they run `fleetctl trim restore {run.run_id} --approve`")


def approve_restore(run: ApprovedRun, actor: str) -> dict:
    """Record `actor`'s approval of restoring a finished trim (FleetError unless they are a listed
    approver, verified by Airflow)."""
    from fleetkit.core.runbook import require_approvers

    approvers = require_approvers(run.runbook.fleet_cluster(), run.runbook.fleet_file)
    if actor not in approvers:
        raise FleetError(f"{actor!r} is not an approver of cluster {run.cluster!r} ({', '.join(approvers)}): only a "
                         "listed approver, logged in to Airflow as themselves, approves a restore")
    return record(run, "restore_approved", actor, f"restore of the finished trim run {run.run_id} approved by {actor} "
                  f"(good for {RESTORE_APPROVAL_HOURS} h, for another person to run)")


def record(run: ApprovedRun, event: str, actor: str, message: str, details: dict | None = None) -> dict:
    return run.runbook.audit(event, actor=actor, digest=run.digest, message=message, details=details)


def describe(run: ApprovedRun, files_for=None) -> list[str]:
    """What the journal says of the run, one line each, for the dry runs. `files_for`: the
    brokers' files (BrokerHosts.files: over SSH for access: ssh brokers), default this machine's."""
    entries = journal.read_journal(run.journal)
    p = execute.progress(run.plan, entries, files_for) if files_for else execute.progress(run.plan, entries)
    gate = entries.get("gate") or {}
    said = {None: "never started", "intent": "started and never finished (killed or lost)", "done": "finished",
            "failed": f"failed: {gate.get('error')}"}
    lines = [f"plan {run.digest}, approved by {run.approver}; journal {run.journal}",
             f"the runbook's execute step: {said.get(gate.get('status'), gate.get('status'))}"]
    for state in ("done", "copied", "pending", "restored", "inconsistent"):
        for m in p["moves"].get(state, []):
            lines.append(f"  {state:<12} {m['source']} -> {m['destination']}" +
                         (f": {m['problem']}" if m.get("problem") else ""))
    lines.append(f"brokers finished: {p['brokers_done'] or 'none'}; stopped or being handled when interrupted: "
                 f"{p['brokers_started'] or 'none'}; re-commits settled {p['recommits_done']} of {p['recommits']}")
    return lines


def finish(ctx: ClusterContext, run: ApprovedRun) -> dict:
    """Resume: re-check what is left, finish it (execute.run with the run's journal), start any
    broker left stopped, verify. Returns {result, teardown, problems}."""
    problems = execute.preconditions(ctx, run.plan)
    if problems:
        raise execute.TrimError("preconditions of what is left no longer hold: " + "; ".join(problems))
    started: list[str] = []
    try:
        result = execute.run(ctx, run.plan)
    finally:
        started = execute.teardown(ctx, run.plan)
    return {"result": result, "teardown": started, "problems": verify.verify(ctx, run.plan, result)}


def undo(ctx: ClusterContext, run: ApprovedRun) -> list[str]:
    """Restore: every quarantined file back (checksums), any broker left stopped started."""
    try:
        return execute.restore(ctx, run.plan)
    finally:
        execute.teardown(ctx, run.plan)
