"""The registry of destructive actions the runbook DAGs gate: each capability's Airflow-free
Action (fleetkit.<capability>.action), under the names the DAGs import."""

from __future__ import annotations

from fleetkit.group_ids.action import GROUP_ID_RECONCILE
from fleetkit.ownership.action import COORDINATOR_RECOVERY
from fleetkit.stuck.action import RESET_OFFSETS, STUCK_SKIP
from fleetkit.trim.action import TRIM_OFFSETS

ACTIONS = {a.name: a for a in (RESET_OFFSETS, STUCK_SKIP, TRIM_OFFSETS, COORDINATOR_RECOVERY, GROUP_ID_RECONCILE)}

__all__ = ["ACTIONS", "COORDINATOR_RECOVERY", "GROUP_ID_RECONCILE", "RESET_OFFSETS", "STUCK_SKIP", "TRIM_OFFSETS"]
