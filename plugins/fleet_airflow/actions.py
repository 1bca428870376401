"""The destructive actions the approval gate runs, adapting the domain library to GateAction."""

from __future__ import annotations

from fleetkit.stuck import reset as offsets_reset
from fleetkit.stuck import rules as stuck
from fleetkit.core.datasets import DataRoot
from fleetkit.stuck.diagnose import diagnose_partition, evidence_items

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
    verify=lambda ctx, plan, result: offsets_reset.verify(ctx.kafka, plan),
    details_table=_reset_table,
)


def _stuck_plan(ctx: ClusterContext, params: dict) -> dict:
    """Diagnose the partition, then plan 'skip N records' for its group (the poison-record fix)."""
    from fleet_airflow import settings

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


STUCK_SKIP = GateAction(
    name="skip_poison_records",
    plan=_stuck_plan,
    check=RESET_OFFSETS.check,
    execute=RESET_OFFSETS.execute,
    verify=RESET_OFFSETS.verify,
    details_table=_reset_table,
)


# -- __consumer_offsets trim ---------------------------------------------------------------------
def _trim_dir(params: dict) -> "Path":
    from pathlib import Path

    from fleetkit.core.plans import safe_component
    from fleet_airflow import settings

    return Path(params.get("data_root") or settings.data_root()) / "reports" / "trim" / safe_component(params["_run_id"])


def _zk_state(ctx: ClusterContext) -> tuple[dict[int, int], dict[int, list[int]]]:
    from fleetkit.collection.offsets_topic import OFFSETS_TOPIC

    if ctx.zk is not None:
        states, _ = ctx.zk.partition_states([OFFSETS_TOPIC])
        return {s.partition: s.leader for s in states}, {s.partition: list(s.isr) for s in states}
    md = ctx.kafka.metadata([OFFSETS_TOPIC])
    return ({p: m.leader for (t, p), m in md.partitions.items()}, {p: list(m.isr) for (t, p), m in md.partitions.items()})


def _trim_plan(ctx: ClusterContext, params: dict) -> dict:
    import json

    from fleetkit.trim import execute as trim
    from fleetkit.core.errors import FleetError
    from fleetkit.core.render import render

    folder = _trim_dir(params)
    f = folder / "trim_plan.json"
    if not f.exists():
        raise FleetError(f"{f} does not exist: the trim_plan task did not produce a plan")
    plans_ = [p for p in json.loads(f.read_text()) if p["cluster"] == ctx.cluster.name]
    if not plans_ or not any(r["quarantine"] for p in plans_[0]["partitions"] for r in p["replicas"]):
        raise FleetError(f"nothing to trim on cluster {ctx.cluster.name!r}: no unhealthy partition has a rolled "
                         "segment that can go (the newest rolled and the active segment always stay)")
    leaders, isr = _zk_state(ctx)
    quarantine_root = str(_quarantine_root(params))
    plan = trim.gate_plan(ctx.cluster, plans_[0], leaders, isr, quarantine_root)
    for b in plan["details"]["order"]:
        segs = [{"files": [str(x) for s in pre["segments"] for x in trim.segment_files(pre["log_dir"], pre["partition"],
                                                                                       s["base_offset"])]}
                for pre in plan["preconditions"][0]["segments"] if pre["broker"] == b]
        (folder / f"runbook-broker-{b}.sh").write_text(render(
            "trim_runbook.sh.j2", plan=plan, digest="(see the approval page)", broker=b, segments=segs,
            quarantine=f"{quarantine_root}/{ctx.cluster.name}/broker-{b}/{params['_run_id']}",
            fix=plan["details"]["cleaner_fix"].get(str(b))))
    return plan


def _quarantine_root(params: dict):
    import os
    from pathlib import Path

    from fleet_airflow import settings

    return Path(os.environ.get("FLEET_QUARANTINE_DIR") or Path(params.get("data_root") or settings.data_root()) /
                "quarantine")


def _group_states(ctx: ClusterContext, groups: list[str]) -> dict[str, str]:
    return {g: d.state if not d.members else "HasMembers:" + d.state
            for g, d in ctx.kafka.describe_groups(groups).items()} if groups else {}


def _trim_check(ctx: ClusterContext, plan: dict) -> list[str]:
    from fleetkit.trim import execute as trim

    recommit_groups = sorted({c["group"] for p in plan["details"]["trim_plan"]["partitions"] for c in p["recommit"]})
    _, isr = _zk_state(ctx)
    return trim.check(plan, isr, _group_states(ctx, recommit_groups))


def _offsets_json(offs: dict) -> dict:
    return {g: (v if isinstance(v, str) else {f"{t}|{p}": o for (t, p), o in v.items()}) for g, v in offs.items()}


def _offsets_from_json(doc: dict) -> dict:
    out = {}
    for g, v in doc.items():
        if isinstance(v, str):
            out[g] = v
        else:
            out[g] = {(k.rsplit("|", 1)[0], int(k.rsplit("|", 1)[1])): o for k, o in v.items()}
    return out


def _all_groups(plan: dict) -> list[str]:
    return sorted({g for p in plan["details"]["trim_plan"]["partitions"] for g in p.get("groups", [])}
                  | set(plan["details"]["groups"]))


def _read_offsets_when_loaded(ctx: ClusterContext, groups: list[str], timeout: float = 300) -> tuple[dict, float]:
    """Committed offsets of groups, retrying while the coordinator is still loading (0.9 answers
    NOT_COORDINATOR then). Returns (offsets, seconds waited)."""
    import time

    import logging

    t0 = time.monotonic()
    while True:
        # 0.9 answers an offset fetch during a load with no offsets and no error, but describe
        # fails with NOT_COORDINATOR: wait for describe, then read
        loading = {g: d.error for g, d in ctx.kafka.describe_groups(groups).items() if d.error}
        offs = ctx.kafka.committed_offsets(groups) if not loading else {}
        failing = loading or {g: v for g, v in offs.items() if isinstance(v, str)}
        if not failing or time.monotonic() - t0 > timeout:
            if failing:
                logging.getLogger(__name__).warning("offsets still not readable after %.0f s: %s", timeout,
                                                    dict(list(failing.items())[:5]))
            if not offs:
                offs = ctx.kafka.committed_offsets(groups)
            return offs, time.monotonic() - t0
        time.sleep(0.5)


def _trim_execute(ctx: ClusterContext, plan: dict) -> dict:
    import logging
    import time

    from fleetkit.trim import execute as trim

    d = plan["details"]
    groups = _all_groups(plan)
    before, _ = _read_offsets_when_loaded(ctx, groups)
    inactive = sorted(g for g, s in _group_states(ctx, groups).items() if s in ("Empty", "Dead"))
    log_dirs = [pre["log_dir"] for pre in plan["preconditions"][0]["segments"]]
    control = trim.lab_control_for(log_dirs)
    if control is None:
        raise trim.TrimError(f"cluster {ctx.cluster.name!r} is not a lab fleet: this runbook moves files only on lab "
                             "brokers; run the rendered runbook-broker-N.sh on each broker instead")
    for b, fix in sorted(d["cleaner_fix"].items()):
        control.set_config(int(b), fix)
    manifests = []
    timings = {}
    for b in d["order"]:
        t0 = time.monotonic()
        control.stop(b)
        timings[f"broker {b} stop"] = round(time.monotonic() - t0, 1)
        for pre in plan["preconditions"][0]["segments"]:
            if pre["broker"] == b:
                label = f"{ctx.cluster.name}/broker-{b}/{trim.OFFSETS_TOPIC}-{pre['partition']}/{plan['run_id']}"
                manifests.append(trim.quarantine(pre["log_dir"], pre["partition"], pre["segments"],
                                                 d["quarantine_root"], label.replace(":", "_").replace("+", "_")))
        t0 = time.monotonic()
        control.start(b)
        ctx.kafka.close()  # a fresh admin client: librdkafka's may keep stale state across the restart
        timings[f"broker {b} start"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        deadline = time.monotonic() + 180
        parts = {pre["partition"] for pre in plan["preconditions"][0]["segments"] if pre["broker"] == b}
        while True:
            _, isr = _zk_state(ctx)
            if all(b in isr.get(p, []) for p in parts):
                break
            if time.monotonic() > deadline:
                raise trim.TrimError(f"broker {b} is not back in the ISR of {sorted(parts)} after 180 s (ISR {isr}); "
                                     "stopping here: the remaining brokers are untouched")
            time.sleep(1)
        timings[f"broker {b} back in ISR"] = round(time.monotonic() - t0, 1)
    offs_now, load_wait = _read_offsets_when_loaded(ctx, groups)
    timings["coordinator load"] = round(load_wait, 1)
    recommitted = []
    for p in d["trim_plan"]["partitions"]:
        for c in p["recommit"]:
            if c["group"] in inactive:
                ctx.kafka.commit_offsets(c["group"], {(c["topic"], c["partition"]): c["offset"]}, retry_for=300)
                recommitted.append(c)
    return {"before": _offsets_json(before), "inactive": inactive, "manifests": manifests, "order": d["order"],
            "timings": timings,
            "recommitted": recommitted, "coordinator_load_wait_seconds": round(load_wait, 1),
            "offsets_missing_before_recommit": sum(1 for g in inactive for tp, o in
                                                   (before.get(g) or {}).items() if not isinstance(offs_now.get(g), str)
                                                   and (offs_now.get(g) or {}).get(tp) is None and o is not None)}


def _trim_verify(ctx: ClusterContext, plan: dict, result: dict) -> list[str]:
    from fleetkit.trim import execute as trim

    groups = _all_groups(plan)
    after, _ = _read_offsets_when_loaded(ctx, groups)
    return trim.compare_offsets(_offsets_from_json(result.get("before") or {}), after, set(result.get("inactive", [])))


def _trim_table(plan: dict) -> dict:
    rows = []
    for p in plan["details"]["trim_plan"]["partitions"]:
        for r in p["replicas"]:
            rows.append([p["partition"], r["broker"], len(r["quarantine"]), len(r["kept"]), r["bytes_freed"],
                         len(p["recommit"]), len(p["active_groups"]), len(p["group_metadata_lost"])])
    return {"header": ["partition", "broker", "segments to quarantine", "segments kept", "bytes freed",
                       "offsets re-committed", "active-group offsets lost", "group metadata lost"], "rows": rows}


TRIM_OFFSETS = GateAction(
    name="trim_offsets_segments",
    plan=_trim_plan,
    check=_trim_check,
    execute=_trim_execute,
    verify=_trim_verify,
    details_table=_trim_table,
)


# -- coordinator recovery ----------------------------------------------------------------------
def _lab_control(ctx: ClusterContext):
    from fleetkit.trim import execute as trim

    return trim.lab_control_for([d for b in ctx.cluster.brokers for d in b.log_dirs])


def _recovery_plan(ctx: ClusterContext, params: dict) -> dict:
    from fleetkit.ownership import recovery
    from fleet_airflow import settings

    return recovery.build_plan(ctx.cluster, ctx.kafka, ctx.zk, params.get("data_root") or settings.data_root(),
                               params, lab_control=_lab_control(ctx))


def _recovery_table(plan: dict) -> dict:
    d = plan["details"]
    return {"header": ["partition", "leader", "leader epoch", "ISR", "replicas", "groups checked"],
            "rows": [[d["partition"], d["leader"], d["leader_epoch"], d["isr"], d["replicas"], len(d["groups"])]]}


def _recovery_verify(ctx: ClusterContext, plan: dict, result: dict) -> list[str]:
    from fleetkit.ownership import recovery

    return recovery.verify(ctx.kafka, ctx.zk, plan)


def _recovery_check(ctx: ClusterContext, plan: dict) -> list[str]:
    from fleetkit.ownership import recovery

    return recovery.check(ctx.zk, plan)


def _recovery_execute(ctx: ClusterContext, plan: dict) -> dict:
    from fleetkit.ownership import recovery

    return recovery.execute(ctx.zk, plan, _lab_control(ctx))


COORDINATOR_RECOVERY = GateAction(
    name="coordinator_recovery",
    plan=_recovery_plan,
    check=_recovery_check,
    execute=_recovery_execute,
    verify=_recovery_verify,
    details_table=_recovery_table,
)


# -- group-id reconciliation (KoP client-to-group mappings) -------------------------------------
def _group_ids_plan(ctx: ClusterContext, params: dict) -> dict:
    from fleetkit.group_ids import reconcile as group_ids
    from fleetkit.core.datasets import iso_z
    from fleetkit.core.errors import FleetError

    from fleet_airflow import settings

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


GROUP_ID_RECONCILE = GateAction(
    name="reconcile_group_ids",
    plan=_group_ids_plan,
    check=lambda ctx, plan: [] if ctx.zk is not None else ["the cluster has no ZooKeeper connection"],
    execute=_group_ids_execute,
    verify=_group_ids_verify,
    details_table=_group_ids_table,
)
