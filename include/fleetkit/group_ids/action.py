"""The group-id reconciliation capability's destructive action: write KoP client-to-group mappings.
The stages live in plan.py, execute.py (preconditions and execution) and verify.py; this module
wires them into the Action and renders the approval page's table."""

from __future__ import annotations

from fleetkit.core.action import Action, ClusterContext


def _plan(ctx: ClusterContext, params: dict) -> dict:
    from fleetkit.group_ids import plan

    return plan.build(ctx, params)


def _check(ctx: ClusterContext, plan: dict) -> list[str]:
    from fleetkit.group_ids import execute

    return execute.preconditions(ctx, plan)


def _execute(ctx: ClusterContext, plan: dict) -> dict:
    from fleetkit.group_ids import execute

    return execute.run(ctx, plan)


def _verify(ctx: ClusterContext, plan: dict, result: dict) -> list[str]:
    from fleetkit.group_ids import verify

    return verify.verify_result(ctx, plan, result)


def details_table(plan: dict) -> dict:
    rows = [[o["class"], o["op"], o["path"], o.get("group"), o["version"]] for o in plan["details"]["ops"]]
    rows += [[f["class"], "none (report only)", f["path"], ", ".join(f["groups"]), None]
             for f in plan["details"]["report_only"]]
    return {"header": ["class", "operation", "path", "live member group", "znode version read"], "rows": rows}


GROUP_ID_RECONCILE = Action(
    name="reconcile_group_ids",
    capability="group_ids",
    plan=_plan,
    check=_check,
    execute=_execute,
    verify=_verify,
    details_table=details_table,
)
