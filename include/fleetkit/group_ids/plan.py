"""Planning a group-id reconciliation for the approval gate: the cluster's mappings and members
read now, classified (rules.diff), and the conditional writes of the chosen classes, each path
with before -> after and the znode version read (``build``); or the writes that undo an earlier
run, from its executed audit record (``rollback_plan``)."""

from __future__ import annotations

from fleetkit.core import settings
from fleetkit.core.action import ClusterContext
from fleetkit.core.datasets import iso_z, utcnow
from fleetkit.core.errors import FleetError
from fleetkit.group_ids.collect import collect
from fleetkit.group_ids.rules import ACTION, CLASSES, diff, ops_for, rollback_ops

#: what execute re-checks (each write also carries its own condition)
PRECONDITIONS = [
    {"check": "znode_versions", "what": "every overwrite and delete passes the znode version read at plan "
     "time (and the znode's creation time is compared first): a znode changed or re-created since is "
     "skipped and reported, never forced; every create fails if the node appeared meanwhile"},
    {"check": "members", "what": "the live members are read again right before writing: a STALE path whose "
     "client came back, or a mapping whose member left or changed group, is skipped (not for a rollback)"},
]


def changes(ops: list[dict]) -> list[dict]:
    """The plan's changes: every path with its data before and after."""
    return [{"target": o["path"], "before": o["before"] if o["before"] is not None else "(absent)",
             "after": o["after"] if o["after"] is not None else "(deleted)"} for o in ops]


def build(ctx: ClusterContext, params: dict) -> dict:
    """The plan of one cluster (params: classes, default MISMATCHED,STALE; rollback_run; data_root)."""
    cfg = ctx.cluster.group_id_mappings
    if cfg is None or ctx.zk is None:
        from fleetkit.group_ids.collect import no_mappings

        raise FleetError(f"cluster {ctx.cluster.name!r}: {no_mappings(ctx.cluster) or 'no ZooKeeper connected'}")
    data_root = str(params.get("data_root") or settings.data_root())
    if params.get("rollback_run"):
        return rollback_plan(ctx, params, data_root)
    classes = [c.strip().upper() for c in str(params.get("classes") or "MISMATCHED,STALE").split(",") if c.strip()]
    coll = collect(ctx.cluster, ctx.kafka, ctx.zk.client)
    findings = diff(coll.mappings, coll.members, cfg.root, cfg.grace_seconds)
    ops = ops_for(findings, classes)
    counts = {k: sum(1 for f in findings if f["class"] == k) for k in CLASSES}
    report_only = [{k: f[k] for k in ("class", "path", "groups", "client_host", "client_id", "reason", "znode_group")}
                   for f in findings if f["class"] in ("CONFLICT", "UNREPRESENTABLE")]
    per_class = ", ".join(f"{sum(1 for o in ops if o['class'] == c)} {c}" for c in classes)
    return {
        "action": ACTION, "cluster": ctx.cluster.name,
        "title": f"Reconcile {len(ops)} KoP group-id mapping(s) under {cfg.root} ({per_class})",
        "created_at": iso_z(coll.observed_at),
        "preconditions": PRECONDITIONS,
        "changes": changes(ops),
        "risks": ["KoP may write a mapping at any moment (FindCoordinator): such a path loses the race and is "
                  "skipped, the next run sees the new truth",
                  "a deleted mapping of a client that reconnects later is written again by KoP itself",
                  f"{counts['CONFLICT']} CONFLICT and {counts['UNREPRESENTABLE']} UNREPRESENTABLE finding(s) are "
                  "reported only and never written"],
        "rollback": {"how": "the executed audit record holds before/after and the versions of every path changed; "
                     "fleetctl audit rollback RECORD_ID triggers this runbook with rollback_run = this run: it "
                     "re-creates deleted znodes with their previous data and sets overwritten ones back, each "
                     "conditional on the version this run left (behind an approval again)",
                     "dag_id": params.get("_dag_id") or "runbook_group_ids",
                     "conf": {"cluster": ctx.cluster.name, "rollback_run": params.get("_run_id") or ""}},
        "details": {"root": cfg.root, "grace_seconds": cfg.grace_seconds, "classes": classes, "ops": ops,
                    "counts": counts, "report_only": report_only, "data_root": data_root,
                    "observed_at": iso_z(coll.observed_at), "problems": coll.problems[:50], "rollback_of": None},
    }


def rollback_plan(ctx: ClusterContext, params: dict, data_root: str) -> dict:
    """The plan that undoes the writes of run `params["rollback_run"]`: its executed audit record, or
    the account of a failed / interrupted one (the writes its journal says were done)."""
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    run = params["rollback_run"]
    # only records the toolkit signed plan a change: a row written into the data root by hand does not
    recs = [r for r in audit.authentic_records(DataRoot(data_root), ctx.cluster.name, run)
            if r["action"] == ACTION and r["event"] in ("executed", "failed", "interrupted")]
    if not recs:
        raise FleetError(f"no executed, failed or interrupted {ACTION} audit record of run {run!r} on cluster "
                         f"{ctx.cluster.name!r} under {data_root}")
    changed: dict[tuple, dict] = {}
    for r in recs:
        details = r.get("details") or {}
        result = details.get("result") or {}
        if result.get("changed_paths") is not None:
            done = result["changed_paths"]
        else:  # failed / interrupted under the gate: the journal's account of the writes done
            done = [e for e in (details.get("journal") or {}).get("done", []) if e.get("op") in ("create", "set", "delete")]
        for c in done:
            changed[(c.get("seq"), c["path"])] = c
    ops = rollback_ops(sorted(changed.values(), key=lambda c: (c.get("seq") if isinstance(c.get("seq"), int) else -1)))
    cfg = ctx.cluster.group_id_mappings
    return {
        "action": ACTION, "cluster": ctx.cluster.name,
        "title": f"Roll back {len(ops)} KoP group-id mapping write(s) of run {run}",
        "created_at": iso_z(utcnow()), "preconditions": PRECONDITIONS, "changes": changes(ops),
        "risks": ["a path written since the run (by KoP or anyone) is skipped, never forced"],
        "rollback": {"how": "roll back this run the same way (its executed audit record)",
                     "dag_id": params.get("_dag_id") or "runbook_group_ids",
                     "conf": {"cluster": ctx.cluster.name, "rollback_run": params.get("_run_id") or ""}},
        "details": {"root": cfg.root, "grace_seconds": cfg.grace_seconds, "classes": ["ROLLBACK"], "ops": ops,
                    "counts": {}, "report_only": [], "data_root": data_root, "observed_at": None, "problems": [],
                    "rollback_of": run},
    }
