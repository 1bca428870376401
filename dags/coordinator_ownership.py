"""coordinator_ownership: renamed to ownership; this id is kept for one release and will be removed.

The same DAG as ownership (built by its code), tagged deprecated and never scheduled: start ownership
instead.
"""

from fleet_dags.ownership import build

dag = build("coordinator_ownership")
