"""Finishing or undoing a trim outside Airflow (`fleetctl trim resume|restore RUN`): the run's
stored plan, the proof it was approved, and its execution journal.

Both act only on a plan that was approved: the audit dataset must hold an `approved` event of
the runbook for that run whose digest is the stored plan's digest now (an edited plan has
another digest). Both are dry runs unless told to execute.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fleetkit.core import audit, journal, plans, settings
from fleetkit.core.action import ClusterContext  # noqa: F401 (for the CLI)
from fleetkit.core.datasets import DataRoot
from fleetkit.core.errors import FleetError
from fleetkit.trim import execute, verify
from fleetkit.trim.plan import ACTION

DAG_ID = "runbook_offsets_trim"


@dataclass
class ApprovedRun:
    dag_id: str
    run_id: str
    plan: dict
    digest: str
    approval: dict  # the `approved` audit record
    journal: Path
    data_root: str

    @property
    def cluster(self) -> str:
        return self.plan["cluster"]


def approved_run(data_root: str, run_id: str, dag_id: str = DAG_ID) -> ApprovedRun:
    """The run's stored plan, refused (FleetError naming the run) unless the audit shows it approved."""
    plan, digest = plans.load(settings.plans_root(data_root), dag_id, run_id)
    if plan.get("action") != ACTION:
        raise FleetError(f"run {run_id!r} of {dag_id}: the stored plan is a {plan.get('action')!r} plan, not {ACTION}")
    rows = [r for r in audit.records(DataRoot(data_root), plan["cluster"], run_id)
            if r["dag_id"] == dag_id and r["action"] == ACTION and r["event"] == "approved"]
    if not rows:
        raise FleetError(f"run {run_id!r} of {dag_id} on cluster {plan['cluster']!r} was never approved (no "
                         f"'approved' audit event under {data_root}): only an approved trim is resumed or restored")
    matching = [r for r in rows if r["digest"] == digest]
    if not matching:
        raise FleetError(f"run {run_id!r}: the stored plan's digest is {digest} but the approval was for "
                         f"{rows[-1]['digest']}: the plan changed after approval; nothing done")
    return ApprovedRun(dag_id, run_id, plan, digest, matching[-1],
                       journal.journal_path(data_root, ACTION, dag_id, run_id, plan["cluster"]), data_root)


def record(run: ApprovedRun, event: str, actor: str, message: str, details: dict | None = None) -> dict:
    return audit.record(DataRoot(run.data_root), cluster=run.cluster, dag_id=run.dag_id, run_id=run.run_id,
                        action=ACTION, event=event, actor=actor, digest=run.digest, message=message, details=details)


def describe(run: ApprovedRun) -> list[str]:
    """What the journal says of the run, one line each, for the dry runs."""
    entries = journal.read_journal(run.journal)
    p = execute.progress(run.plan, entries)
    gate = entries.get("gate") or {}
    said = {None: "never started", "intent": "started and never finished (killed or lost)", "done": "finished",
            "failed": f"failed: {gate.get('error')}"}
    lines = [f"plan {run.digest}, approved by {run.approval['actor']}; journal {run.journal}",
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
