"""runbook_reset_offsets: move a stopped group's committed offsets, behind an approval."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param

from fleet_airflow import settings
from fleet_airflow.actions import RESET_OFFSETS
from fleet_airflow.gate import approval_gate

DOC = """
### Reset a consumer group's offsets (incident runbook, destructive)

The fix for a consumer **stuck on a poison record** (alive, committed offset frozen): stop the
consumers, then move the group's committed offset past the record with target `skip 1`.

**Params**: `cluster`, `group`, `topic`, `partitions` (`all` or `0,2`), `target`:
`earliest` | `latest` | `offset N` | `skip N` (records forward from the committed offset) |
`restore` (with `offsets` = `{"0": 17, "1": 20}`, what a rollback uses); `dry_run` (default
**true**: plan and render only).

**Flow**: `plan` reads the committed offsets, log start/end and the group state and stores the
plan (digest shown) -> `dry_run_stop` -> `approve` (Browse > Required Actions, or the task's
page: Approve / Reject; no answer in 4 h = Reject) -> `lock` (one destructive runbook per
cluster) -> `execute` (refuses unless the approved digest matches the stored plan and the group
is still Empty/Dead with the same committed offsets) -> `verify` (reads the offsets back) ->
`unlock`. Every step is in the audit dataset.

**Roll back**: the `executed` audit record holds the previous offsets:
`fleetctl audit rollback RECORD_ID` triggers this runbook with target `restore`.
"""

with DAG(
    dag_id="runbook_reset_offsets",
    description="Reset a stopped consumer group's committed offsets (approval required)",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=4,
    doc_md=DOC,
    tags=["fleet", "runbook", "destructive"],
    default_args={"retries": 0},
    params={
        "cluster": Param("lab", type="string", minLength=1, description="cluster name from the fleet file"),
        "group": Param("", type="string", minLength=1, description="consumer group id (exactly as the cluster has it)"),
        "topic": Param("", type="string", minLength=1, description="topic"),
        "partitions": Param("all", type="string", description="'all' or partition numbers like 0,2"),
        "target": Param("skip 1", type="string",
                        description="earliest | latest | offset N | skip N | restore"),
        "offsets": Param({}, type="object", description="for target restore: {partition: offset}"),
        "dry_run": Param(True, type="boolean", description="plan and render only (default)"),
        "approval_timeout": Param(4 * 3600, type="integer", minimum=10,
                                  description="seconds to wait for an approver; no answer = Reject"),
        "fleet_file": Param(settings.fleet_file(), type="string"),
        "data_root": Param(settings.data_root(), type="string"),
    },
) as dag:
    approval_gate(RESET_OFFSETS)
