"""runbook_coordinator_recovery: renamed to runbook_ownership; this id is kept for one release and will be removed.

The same runbook as runbook_ownership (built by its code), tagged deprecated: start runbook_ownership instead.
"""

from fleet_dags.runbook_ownership import build

dag = build("runbook_coordinator_recovery")
