"""runbook_stuck_partition: renamed to runbook_stuck_skip; this id is kept for one release and will be removed.

The same runbook as runbook_stuck_skip (built by its code), tagged deprecated: start runbook_stuck_skip instead.
"""

from fleet_dags.runbook_stuck_skip import build

dag = build("runbook_stuck_partition")
