"""The coordinator-ownership capability's destructive action: recover a coordinator that does not serve its groups."""

from __future__ import annotations

from fleetkit.core.action import Action, ClusterContext


def _lab_control(ctx: ClusterContext):
    from fleetkit.clients.broker_control import control_for

    return control_for(ctx.cluster, getattr(ctx, "broker_hosts", None))


def _leadership(ctx: ClusterContext):
    from fleetkit.clients.leadership import for_cluster

    return for_cluster(ctx.kafka, ctx.zk)


def _recovery_plan(ctx: ClusterContext, params: dict) -> dict:
    from fleetkit.core import settings
    from fleetkit.ownership.plan import build_plan

    return build_plan(ctx.cluster, ctx.kafka, ctx.zk, params.get("data_root") or settings.data_root(), params,
                      lab_control=_lab_control(ctx))


def _recovery_table(plan: dict) -> dict:
    d = plan["details"]
    return {"header": ["partition", "leader", "leader epoch", "ISR", "replicas", "replicas after", "new leader",
                       "groups checked"],
            "rows": [[d["partition"], d["leader"], d["leader_epoch"], d["isr"], d["replicas"], d.get("new_order"),
                      d.get("target"), len(d["groups"])]]}


def _recovery_verify(ctx: ClusterContext, plan: dict, result: dict) -> list[str]:
    from fleetkit.ownership.verify import verify

    return verify(ctx.kafka, ctx.zk, plan)


def _recovery_check(ctx: ClusterContext, plan: dict) -> list[str]:
    from fleetkit.ownership.execute import check

    return check(_leadership(ctx), plan)


def _recovery_execute(ctx: ClusterContext, plan: dict) -> dict:
    from fleetkit.ownership.execute import execute

    return execute(_leadership(ctx), plan, _lab_control(ctx), journal_path=ctx.journal_path)


COORDINATOR_RECOVERY = Action(
    name="coordinator_recovery",
    capability="ownership",
    plan=_recovery_plan,
    check=_recovery_check,
    execute=_recovery_execute,
    verify=_recovery_verify,
    details_table=_recovery_table,
)
