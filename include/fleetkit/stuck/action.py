"""The stuck-offsets capability's destructive actions: reset a group's offsets, skip poison records."""

from __future__ import annotations

from fleetkit.core.action import Action, ClusterContext
from fleetkit.core.datasets import DataRoot
from fleetkit.stuck import reset as offsets_reset
from fleetkit.stuck import rules as stuck
from fleetkit.stuck.diagnose import diagnose_partition, evidence_items


def _reset_plan(ctx: ClusterContext, params: dict) -> dict:
    return offsets_reset.build_plan(ctx.kafka, ctx.cluster.name, params.get("group"), params.get("topic"),
                                    params.get("partitions"), params.get("target"), params.get("offsets") or None)


def _reset_table(plan: dict) -> dict:
    header = ["partition", "committed", "log start", "log end", "new offset", "lag before", "lag after"]
    rows = [[r["partition"], r["committed"], r["log_start"], r["log_end"], r["new"], r["lag_before"], r["lag_after"]]
            for r in plan["details"]["partitions"]]
    return {"header": header, "rows": rows}


RESET_OFFSETS = Action(
    name=offsets_reset.ACTION,
    plan=_reset_plan,
    check=lambda ctx, plan: offsets_reset.check_preconditions(ctx.kafka, plan),
    execute=lambda ctx, plan: offsets_reset.execute(ctx.kafka, plan),
    verify=lambda ctx, plan, result: offsets_reset.verify(ctx.kafka, plan),
    details_table=_reset_table,
)


def _stuck_plan(ctx: ClusterContext, params: dict) -> dict:
    """Diagnose the partition, then plan 'skip N records' for its group (the poison-record fix)."""
    from fleetkit.core import settings

    partition = int(params["partition"])
    window = stuck.parse_duration(params.get("window") or "15m")
    d = diagnose_partition(ctx.kafka, DataRoot(params.get("data_root") or settings.data_root()), ctx.cluster.name,
                           params["group"], params["topic"], partition, window)
    plan = offsets_reset.build_plan(ctx.kafka, ctx.cluster.name, params["group"], params["topic"], str(partition),
                                    f"skip {int(params.get('skip') or 1)}")
    plan["title"] = (f"Skip {int(params.get('skip') or 1)} record(s) of {params['topic']}-{partition} for group "
                     f"{params['group']} (stuck at offset {d['committed_offset']}, {d['status']})")
    plan["evidence"] = evidence_items(d)
    plan["details"]["diagnosis"] = d
    return plan


STUCK_SKIP = Action(
    name="skip_poison_records",
    plan=_stuck_plan,
    check=RESET_OFFSETS.check,
    execute=RESET_OFFSETS.execute,
    verify=RESET_OFFSETS.verify,
    details_table=_reset_table,
)
