"""The group-id reconciliation capability's destructive action: write KoP client-to-group mappings.
The stages live in plan.py, execute.py (preconditions and execution) and verify.py; this module
wires them into the Action and renders the approval page's table."""

from __future__ import annotations

from fleetkit.core.action import Action, lazy


def details_table(plan: dict) -> dict:
    rows = [[o["class"], o["op"], o["path"], o.get("group"), o["version"]] for o in plan["details"]["ops"]]
    rows += [[f["class"], "none (report only)", f["path"], ", ".join(f["groups"]), None]
             for f in plan["details"]["report_only"]]
    return {"header": ["class", "operation", "path", "live member group", "znode version read"], "rows": rows}


GROUP_ID_RECONCILE = Action(
    name="reconcile_group_ids",
    capability="group_ids",
    plan=lazy("fleetkit.group_ids.plan", "build"),
    check=lazy("fleetkit.group_ids.execute", "preconditions"),
    execute=lazy("fleetkit.group_ids.execute", "run"),
    verify=lazy("fleetkit.group_ids.verify", "verify_result"),
    details_table=details_table,
)
