"""The group-id reconciliation capability's destructive action: write KoP client-to-group mappings."""

from __future__ import annotations

from fleetkit.core.action import Action, ClusterContext


# -- group-id reconciliation (KoP client-to-group mappings) -------------------------------------
def _group_ids_plan(ctx: ClusterContext, params: dict) -> dict:
    from fleetkit.group_ids import reconcile as group_ids
    from fleetkit.core.datasets import iso_z
    from fleetkit.core.errors import FleetError

    from fleetkit.core import settings

    cfg = ctx.cluster.group_id_mappings
    if cfg is None or ctx.zk is None:
        raise FleetError(f"cluster {ctx.cluster.name!r} has no group_id_mappings section (and zookeeper) in the "
                         "fleet file: it has no KoP mappings to reconcile")
    data_root = str(params.get("data_root") or settings.data_root())
    if params.get("rollback_run"):
        return _group_ids_rollback_plan(ctx, params, data_root)
    classes = [c.strip().upper() for c in str(params.get("classes") or "MISMATCHED,STALE").split(",") if c.strip()]
    coll = group_ids.collect(ctx.cluster, ctx.kafka, ctx.zk.client)
    findings = group_ids.diff(coll.mappings, coll.members, cfg.root, cfg.grace_seconds)
    ops = group_ids.ops_for(findings, classes)
    counts = {k: sum(1 for f in findings if f["class"] == k) for k in group_ids.CLASSES}
    report_only = [{k: f[k] for k in ("class", "path", "groups", "client_host", "client_id", "reason", "znode_group")}
                   for f in findings if f["class"] in ("CONFLICT", "UNREPRESENTABLE")]
    per_class = ", ".join(f"{sum(1 for o in ops if o['class'] == c)} {c}" for c in classes)
    return {
        "action": group_ids.ACTION, "cluster": ctx.cluster.name,
        "title": f"Reconcile {len(ops)} KoP group-id mapping(s) under {cfg.root} ({per_class})",
        "created_at": iso_z(coll.observed_at),
        "preconditions": _GROUP_IDS_PRECONDITIONS,
        "changes": _group_ids_changes(ops),
        "risks": ["KoP may write a mapping at any moment (FindCoordinator): such a path loses the race and is "
                  "skipped, the next run sees the new truth",
                  "a deleted mapping of a client that reconnects later is written again by KoP itself",
                  f"{counts['CONFLICT']} CONFLICT and {counts['UNREPRESENTABLE']} UNREPRESENTABLE finding(s) are "
                  "reported only and never written"],
        "rollback": {"how": "the executed audit record holds before/after and the versions of every path changed; "
                     "fleetctl audit rollback RECORD_ID triggers this runbook with rollback_run = this run: it "
                     "re-creates deleted znodes with their previous data and sets overwritten ones back, each "
                     "conditional on the version this run left (behind an approval again)",
                     "dag_id": params.get("_dag_id") or "runbook_group_id_reconciliation",
                     "conf": {"cluster": ctx.cluster.name, "rollback_run": params.get("_run_id") or ""}},
        "details": {"root": cfg.root, "grace_seconds": cfg.grace_seconds, "classes": classes, "ops": ops,
                    "counts": counts, "report_only": report_only, "data_root": data_root,
                    "observed_at": iso_z(coll.observed_at), "problems": coll.problems[:50], "rollback_of": None},
    }


_GROUP_IDS_PRECONDITIONS = [
    {"check": "znode_versions", "what": "every overwrite and delete passes the znode version read at plan "
     "time (and the znode's creation time is compared first): a znode changed or re-created since is "
     "skipped and reported, never forced; every create fails if the node appeared meanwhile"},
    {"check": "members", "what": "the live members are read again right before writing: a STALE path whose "
     "client came back, or a mapping whose member left or changed group, is skipped (not for a rollback)"},
]


def _group_ids_changes(ops: list[dict]) -> list[dict]:
    return [{"target": o["path"], "before": o["before"] if o["before"] is not None else "(absent)",
             "after": o["after"] if o["after"] is not None else "(deleted)"} for o in ops]


def _group_ids_rollback_plan(ctx: ClusterContext, params: dict, data_root: str) -> dict:
    from fleetkit.core import audit
    from fleetkit.group_ids import reconcile as group_ids
    from fleetkit.core.datasets import DataRoot, iso_z, utcnow
    from fleetkit.core.errors import FleetError

    run = params["rollback_run"]
    recs = [r for r in audit.records(DataRoot(data_root), ctx.cluster.name, run)
            if r["action"] == group_ids.ACTION and r["event"] == "executed"]
    if not recs:
        raise FleetError(f"no executed {group_ids.ACTION} audit record of run {run!r} on cluster {ctx.cluster.name!r} "
                         f"under {data_root}")
    changed = [c for r in recs for c in (r["details"].get("result") or {}).get("changed_paths", [])]
    ops = group_ids.rollback_ops(changed)
    cfg = ctx.cluster.group_id_mappings
    return {
        "action": group_ids.ACTION, "cluster": ctx.cluster.name,
        "title": f"Roll back {len(ops)} KoP group-id mapping write(s) of run {run}",
        "created_at": iso_z(utcnow()), "preconditions": _GROUP_IDS_PRECONDITIONS, "changes": _group_ids_changes(ops),
        "risks": ["a path written since the run (by KoP or anyone) is skipped, never forced"],
        "rollback": {"how": "roll back this run the same way (its executed audit record)",
                     "dag_id": params.get("_dag_id") or "runbook_group_id_reconciliation",
                     "conf": {"cluster": ctx.cluster.name, "rollback_run": params.get("_run_id") or ""}},
        "details": {"root": cfg.root, "grace_seconds": cfg.grace_seconds, "classes": ["ROLLBACK"], "ops": ops,
                    "counts": {}, "report_only": [], "data_root": data_root, "observed_at": None, "problems": [],
                    "rollback_of": run},
    }


def _group_ids_execute(ctx: ClusterContext, plan: dict) -> dict:
    from fleetkit.group_ids import reconcile as group_ids

    d = plan["details"]
    ops, dropped = d["ops"], []
    if not d.get("rollback_of"):  # a rollback restores what was there, whatever the members say
        members, _ = group_ids.read_members(ctx.kafka, ctx.cluster.name, None)
        ops, dropped = group_ids.recheck_members(d["ops"], members)
    journal = group_ids.journal_path(d["data_root"], plan["dag_id"], plan["run_id"], ctx.cluster.name)
    try:
        res = group_ids.apply(ctx.zk.client, ops, d["root"], journal)
    except group_ids.ApplyInterrupted as e:
        group_ids.record_interrupted(d["data_root"], ctx.cluster.name, plan["dag_id"], plan["run_id"],
                                     group_ids.ACTION, e)
        raise
    res.skipped.extend(dropped)
    return res.to_dict()


def _group_ids_verify(ctx: ClusterContext, plan: dict, result: dict) -> list[str]:
    import logging

    from fleetkit.group_ids import reconcile as group_ids

    problems, notes = group_ids.verify(ctx.zk.client, result.get("changed_paths") or [])
    for n in notes:
        logging.getLogger(__name__).warning("written since by someone else (theirs stands): %s", n)
    return problems


def _group_ids_table(plan: dict) -> dict:
    rows = [[o["class"], o["op"], o["path"], o.get("group"), o["version"]] for o in plan["details"]["ops"]]
    rows += [[f["class"], "none (report only)", f["path"], ", ".join(f["groups"]), None]
             for f in plan["details"]["report_only"]]
    return {"header": ["class", "operation", "path", "live member group", "znode version read"], "rows": rows}


GROUP_ID_RECONCILE = Action(
    name="reconcile_group_ids",
    plan=_group_ids_plan,
    check=lambda ctx, plan: [] if ctx.zk is not None else ["the cluster has no ZooKeeper connection"],
    execute=_group_ids_execute,
    verify=_group_ids_verify,
    details_table=_group_ids_table,
)
