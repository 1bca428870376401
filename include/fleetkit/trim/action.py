"""The offsets-topic trim capability's destructive action: quarantine old __consumer_offsets
segments. The stages live in plan.py, execute.py (preconditions and execution) and verify.py;
this module wires them into the Action and renders the approval page's table."""

from __future__ import annotations

from fleetkit.core.action import Action, ClusterContext


def _plan(ctx: ClusterContext, params: dict) -> dict:
    from fleetkit.trim import plan

    return plan.build(ctx, params)


def _check(ctx: ClusterContext, plan: dict) -> list[str]:
    from fleetkit.trim import execute

    return execute.preconditions(ctx, plan)


def _execute(ctx: ClusterContext, plan: dict) -> dict:
    from fleetkit.trim import execute

    return execute.run(ctx, plan)


def _verify(ctx: ClusterContext, plan: dict, result: dict) -> list[str]:
    from fleetkit.trim import verify

    return verify.verify(ctx, plan, result)


def _teardown(ctx: ClusterContext, plan: dict) -> list[str]:
    from fleetkit.trim import execute

    return execute.teardown(ctx, plan)


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
    plan=_plan,
    check=_check,
    execute=_execute,
    verify=_verify,
    details_table=details_table,
    teardown=_teardown,
)
