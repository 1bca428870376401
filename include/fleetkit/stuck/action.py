"""The stuck-offsets capability's destructive actions: reset a group's offsets, skip poison records."""

from __future__ import annotations

from fleetkit.core.action import Action, ClusterContext
from fleetkit.core.datasets import DataRoot
from fleetkit.stuck import execute, plan, rules, verify, zk_reset


def _zk(p: dict) -> bool:
    """A plan of offsets kept in ZooKeeper (fleetkit.stuck.zk_reset), not in Kafka."""
    return (p.get("details") or {}).get("source") in zk_reset.SOURCES


def _reset_plan(ctx: ClusterContext, params: dict) -> dict:
    if (params.get("source") or "kafka") != "kafka":
        return zk_reset.build_plan(ctx, params)
    return plan.build_plan(ctx.kafka, ctx.cluster.name, params.get("group"), params.get("topic"),
                           params.get("partitions"), params.get("target"), params.get("offsets") or None)


def _reset_table(p: dict) -> dict:
    header = ["partition", "committed", "log start", "log end", "new offset", "lag before", "lag after"]
    rows = [[r["partition"], r["committed"], r["log_start"], r["log_end"], r["new"], r["lag_before"], r["lag_after"]]
            for r in p["details"]["partitions"]]
    return {"header": header, "rows": rows}


RESET_OFFSETS = Action(
    name=plan.ACTION,
    capability="stuck",
    plan=_reset_plan,
    check=lambda ctx, p: (zk_reset.check_preconditions(ctx, p) if _zk(p)
                          else execute.check_preconditions(ctx.kafka, p)),
    execute=lambda ctx, p: (zk_reset.execute(ctx, p, ctx.journal_path) if _zk(p)
                            else execute.execute(ctx.kafka, p, ctx.journal_path)),
    verify=lambda ctx, p, result: zk_reset.verify(ctx, p) if _zk(p) else verify.verify(ctx.kafka, p),
    details_table=_reset_table,
)


def _stuck_plan(ctx: ClusterContext, params: dict) -> dict:
    from fleetkit.core import settings

    partition = int(params["partition"])
    window = rules.parse_duration(params.get("window") or "15m")
    root = DataRoot(params.get("data_root") or settings.data_root())
    return plan.build_skip_plan(ctx.kafka, root, ctx.cluster.name, params["group"], params["topic"], partition,
                                skip=int(params.get("skip") or 1), window=window,
                                open_record_reader=ctx.open_runbook_kafka)


STUCK_SKIP = Action(
    name="skip_poison_records",
    capability="stuck",
    plan=_stuck_plan,
    check=RESET_OFFSETS.check,
    execute=RESET_OFFSETS.execute,
    verify=RESET_OFFSETS.verify,
    details_table=_reset_table,
)
