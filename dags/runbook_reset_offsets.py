"""runbook_reset_offsets: renamed to runbook_stuck_reset; this id is kept for one release and will be removed.

The same runbook as runbook_stuck_reset (built by its code), tagged deprecated: start runbook_stuck_reset instead.
"""

from fleet_dags.runbook_stuck_reset import build

dag = build("runbook_reset_offsets")
