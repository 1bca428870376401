"""runbook_offsets_trim: renamed to runbook_trim; this id is kept for one release and will be removed.

The same runbook as runbook_trim (built by its code), tagged deprecated: start runbook_trim instead.
"""

from fleet_dags.runbook_trim import build

dag = build("runbook_offsets_trim")
