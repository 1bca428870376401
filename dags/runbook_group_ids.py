"""runbook_group_ids: overwrite MISMATCHED and delete STALE KoP mappings, behind an approval."""

from __future__ import annotations

from airflow.sdk import DAG, Param

from fleet_airflow.actions import GROUP_ID_RECONCILE
from fleet_airflow.dag_files import dag_kwargs
from fleet_airflow.gate import approval_gate, runbook_dag_args

DOC = """
### Reconcile KoP group-id mappings (runbook, destructive)

Reads the cluster's mapping znodes (`<root>/<ip>-<clientId>` = group id, root from the fleet
file's `group_id_mappings`) and the live members now, classifies every path (UNREPRESENTABLE,
CONFLICT, MISMATCHED, MISSING, STALE, OK; see `group_ids`) and plans the writes of
the chosen `classes` (default `MISMATCHED,STALE`; add `MISSING` to create those too).

**Params**: `cluster`, `classes`, `rollback_run`, `dry_run` (default **true**: plan and render only).

**Flow**: `plan` (every path with before -> after and the znode version read) -> `dry_run_stop` ->
`approve` (Browse > Required Actions; no answer in 4 h = Reject) -> `lock` -> `execute` -> `verify`
-> `unlock`. Execute re-reads the members (a STALE path whose client came back is skipped), then
writes conditionally: set and delete pass the version read (a znode changed or re-created since is
skipped and reported, never forced), create fails if the node appeared. Each write is journaled
(`journals/group_ids/<dag>/<run>/<cluster>.jsonl`: intent before, outcome after), so a ZooKeeper
session lost mid-way leaves an exact record (also in the audit). CONFLICT and UNREPRESENTABLE
findings are listed and never written.

**Roll back**: the `executed` audit record holds before/after and versions of every changed path:
`fleetctl audit rollback RECORD_ID` (dry run) / `--execute` triggers this runbook with
`rollback_run` = that run: deleted znodes are re-created with their previous data, overwritten
ones set back, each conditional on the version the run left, behind an approval again.
"""


def build(dag_id: str = "runbook_group_ids"):
    """The runbook under `dag_id`: its own, or an old one of fleet_airflow.dag_files.RENAMED (the
    deprecated alias, the same tasks)."""
    with DAG(**dag_kwargs(runbook_dag_args(
        dag_id,
        "Overwrite MISMATCHED / delete STALE KoP group-id mappings (approval required)",
        DOC,
        {"classes": Param("MISMATCHED,STALE", type="string", pattern=r"^\s*[A-Za-z]+(\s*,\s*[A-Za-z]+)*\s*$",
                          description="classes to write: MISMATCHED, STALE, MISSING (comma separated)"),
         "rollback_run": Param("", type="string",
                               description="roll back the writes of this earlier run of this runbook instead "
                                           "(set by fleetctl audit rollback)")},
    ))) as dag:
        approval_gate(GROUP_ID_RECONCILE)
    return dag


dag = build()
