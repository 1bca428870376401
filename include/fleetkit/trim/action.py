"""The offsets-topic trim capability's destructive action: quarantine old __consumer_offsets segments."""

from __future__ import annotations

from fleetkit.core.action import Action, ClusterContext


# -- __consumer_offsets trim ---------------------------------------------------------------------
def _trim_dir(params: dict) -> "Path":
    from pathlib import Path

    from fleetkit.core import settings

    return Path(params.get("data_root") or settings.data_root()) / "reports" / "trim" / settings.safe_component(params["_run_id"])


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
    from fleetkit.core import settings

    return settings.quarantine_root(params.get("data_root") or settings.data_root())


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


TRIM_OFFSETS = Action(
    name="trim_offsets_segments",
    plan=_trim_plan,
    check=_trim_check,
    execute=_trim_execute,
    verify=_trim_verify,
    details_table=_trim_table,
)
