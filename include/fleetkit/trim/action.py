"""The offsets-topic trim capability's destructive action: quarantine old __consumer_offsets
segments. The stages live in plan.py, execute.py (preconditions and execution) and verify.py;
this module wires them into the Action and renders the approval page's table."""

from __future__ import annotations

from fleetkit.core.action import Action, lazy


def details_table(plan: dict) -> dict:
    rows = []
    for p in plan["details"]["trim_plan"]["partitions"]:
        for r in p["replicas"]:
            rows.append([p["partition"], r["broker"], len(r["quarantine"]), len(r["kept"]), r["bytes_freed"],
                         len(p["recommit"]), len(p["active_groups"]), len(p["group_metadata_lost"])])
    return {"header": ["partition", "broker", "segments to quarantine", "segments kept", "bytes freed",
                       "offsets re-committed", "active-group offsets lost", "group metadata lost"], "rows": rows}


TRIM_OFFSETS = Action(
    name="trim_offsets_segments",
    capability="trim",
    plan=lazy("fleetkit.trim.plan", "build"),
    check=lazy("fleetkit.trim.execute", "preconditions"),
    execute=lazy("fleetkit.trim.execute", "run"),
    verify=lazy("fleetkit.trim.verify", "verify"),
    details_table=details_table,
    teardown=lazy("fleetkit.trim.execute", "teardown"),
)
