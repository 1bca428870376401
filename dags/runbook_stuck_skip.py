"""runbook_stuck_skip: diagnose a stuck partition and offer the poison-record fix."""

from __future__ import annotations

from airflow.sdk import DAG, Param

from fleet_airflow.actions import STUCK_SKIP
from fleet_airflow.dag_files import dag_kwargs
from fleet_airflow.gate import approval_gate, runbook_dag_args

DOC = """
### Stuck partition (incident runbook)

For a partition the maintenance report flags STALLED (alive, offset frozen: usually a **poison
record** the consumer fails on and retries forever) or STOPPED.

**plan** diagnoses from the latest snapshots and the live cluster: the rules' verdict and reason,
the group's state and members, committed / log start / log end / lag, and the record at the
committed offset (its offset, timestamp (none on 0.9), key and size; never its value). With
`dry_run` (the default) the run stops there: that is the diagnosis.

The fix offered through the approval gate: **skip `skip` record(s)** (default 1) for the group.
Stop the group's consumers first: the execution refuses while the group has live members, or if
its committed offset moved since the plan. Approve in Browse > Required Actions; the audit records
the previous offset and `fleetctl audit rollback RECORD_ID` moves it back.
"""


def build(dag_id: str = "runbook_stuck_skip"):
    """The runbook under `dag_id`: its own, or an old one of fleet_airflow.dag_files.RENAMED (the
    deprecated alias, the same tasks)."""
    with DAG(**dag_kwargs(runbook_dag_args(
        dag_id,
        "Diagnose a stuck partition; skip a poison record (approval required)",
        DOC,
        {
            "group": Param("", type="string", minLength=1, description="consumer group id (exactly as the cluster has it)"),
            "topic": Param("", type="string", minLength=1, description="topic"),
            "partition": Param(0, type="integer", minimum=0, description="partition"),
            "skip": Param(1, type="integer", minimum=1, description="records to skip forward"),
            "window": Param("15m", type="string", pattern=r"^\d+(\.\d+)?[smhd]$"),
        },
    ))) as dag:
        approval_gate(STUCK_SKIP)
    return dag


dag = build()
