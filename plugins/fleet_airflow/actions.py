"""The destructive actions the approval gate runs, adapting the domain library to GateAction."""

from __future__ import annotations

from fleetkit import offsets_reset

from fleet_airflow.gate import ClusterContext, GateAction


def _reset_plan(ctx: ClusterContext, params: dict) -> dict:
    return offsets_reset.build_plan(ctx.kafka, ctx.cluster.name, params.get("group"), params.get("topic"),
                                    params.get("partitions"), params.get("target"), params.get("offsets") or None)


def _reset_table(plan: dict) -> dict:
    header = ["partition", "committed", "log start", "log end", "new offset", "lag before", "lag after"]
    rows = [[r["partition"], r["committed"], r["log_start"], r["log_end"], r["new"], r["lag_before"], r["lag_after"]]
            for r in plan["details"]["partitions"]]
    return {"header": header, "rows": rows}


RESET_OFFSETS = GateAction(
    name=offsets_reset.ACTION,
    plan=_reset_plan,
    check=lambda ctx, plan: offsets_reset.check_preconditions(ctx.kafka, plan),
    execute=lambda ctx, plan: offsets_reset.execute(ctx.kafka, plan),
    verify=lambda ctx, plan: offsets_reset.verify(ctx.kafka, plan),
    details_table=_reset_table,
)
