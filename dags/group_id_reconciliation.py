"""group_id_reconciliation: renamed to group_ids; this id is kept for one release and will be removed.

The same DAG as group_ids (built by its code), tagged deprecated and never scheduled: start group_ids
instead.
"""

from fleet_dags.group_ids import build

dag = build("group_id_reconciliation")
