"""runbook_group_id_reconciliation: renamed to runbook_group_ids; this id is kept for one release and will be removed.

The same runbook as runbook_group_ids (built by its code), tagged deprecated: start runbook_group_ids instead.
"""

from fleet_dags.runbook_group_ids import build

dag = build("runbook_group_id_reconciliation")
