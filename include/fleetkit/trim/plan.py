"""Planning a __consumer_offsets trim: the approval-gate plan of one cluster's trim plan (from
spark_jobs/trim_plan.py) and the shell runbook of each broker, for operators who move the files
with their own tooling.
"""

from __future__ import annotations

from pathlib import Path

from fleetkit.core.action import ClusterContext
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.trim.cleaner import fix_mode
from fleetkit.clients.offsets_leaders import leaders_and_isr
from fleetkit.trim.layout import FILE_ORDER, file_suffixes, host_quarantine_root, kraft, quarantine_folder

ACTION = "trim_offsets_segments"


def gate_plan(cluster, trim_plan: dict, leaders: dict[int, int], isr: dict[int, list[int]],
              quarantine_root: str | None) -> dict:
    """The approval-gate plan for one cluster's trim plan (from spark_jobs/trim_plan.py).
    `quarantine_root`: where the files of brokers on the worker's own disk go (None when every
    broker is reached over SSH: each quarantines beside its log dir, on its host)."""
    changes, seg_pre, brokers = [], [], set()
    fixes: dict[int, dict] = {}
    for p in trim_plan["partitions"]:
        for r in p["replicas"]:
            if not r["quarantine"]:
                continue
            brokers.add(r["broker"])
            for s in r["quarantine"]:
                changes.append({"target": f"broker {r['broker']} {OFFSETS_TOPIC}-{p['partition']} segment "
                                          f"{s['base_offset']:020d}",
                                "before": f"{s['size_bytes']} bytes in {r['log_dir']}", "after": "quarantine"})
            pre = {"broker": r["broker"], "log_dir": r["log_dir"], "partition": p["partition"],
                   "segments": r["quarantine"]}
            if _over_ssh(cluster, r["broker"]):  # its quarantine is on its host, beside the log dir
                pre["quarantine_root"] = host_quarantine_root(r["log_dir"])
            seg_pre.append(pre)
            if r.get("fix") and "log.cleaner.dedupe.buffer.size" in r["fix"]:
                cur = fixes.get(r["broker"], {}).get("log.cleaner.dedupe.buffer.size", 0)
                # "apply" (live: a dynamic broker config from Kafka 1.1; restart: server.properties)
                # is what the broker's runbook tells the operator to do
                fixes[r["broker"]] = {"log.cleaner.dedupe.buffer.size":
                                      max(cur, int(r["fix"]["log.cleaner.dedupe.buffer.size"])),
                                      "apply": r["fix"].get("apply") or fix_mode(cluster.version_tuple)}
        for c in p["recommit"]:
            changes.append({"target": f"group {c['group']} {c['topic']}-{c['partition']}",
                            "before": f"offset {c['offset']} only in a removed segment",
                            "after": f"re-committed {c['offset']}"})
    for b, fix in sorted(fixes.items()):
        changes.append({"target": f"broker {b} log.cleaner.dedupe.buffer.size",
                        "before": str(cluster.cleaner.dedupe_buffer_size),
                        "after": str(fix["log.cleaner.dedupe.buffer.size"])})
    parts = [p["partition"] for p in trim_plan["partitions"]]
    part_leaders = {p: leaders.get(p) for p in parts}
    order = sorted(brokers, key=lambda b: (b in part_leaders.values(), b))  # followers first, leaders last
    groups = sorted({c["group"] for p in trim_plan["partitions"] for c in p["recommit"] + p["active_groups"]})
    bytes_freed = sum(r["bytes_freed"] for p in trim_plan["partitions"] for r in p["replicas"])
    active = [c for p in trim_plan["partitions"] for c in p["active_groups"]]
    metadata_lost = [g for p in trim_plan["partitions"] for g in p["group_metadata_lost"]]
    from fleetkit.core.datasets import iso_z, utcnow

    return {
        "action": ACTION, "cluster": cluster.name, "created_at": iso_z(utcnow()),
        "title": f"Trim {len(changes)} change(s) on {OFFSETS_TOPIC} partition(s) {', '.join(map(str, parts))} "
                 f"(frees {bytes_freed:,} bytes)",
        "preconditions": [
            {"check": "segments_unchanged", "what": "every segment to quarantine still exists with its planned size",
             "segments": seg_pre},
            {"check": "brokers_in_isr", "what": f"brokers {order} are in the ISR of the trimmed partitions",
             "isr": {str(k): v for k, v in isr.items() if k in parts}},
        ],
        "changes": changes,
        "risks": [
            "Each broker is stopped while its files move: its partitions lose a replica meanwhile (followers "
            "first, the current leader last, so the new leader never has to load an untrimmed log).",
            f"{len(active)} offset(s) of groups with live members lie only in removed segments; they are NOT "
            "re-committed (the group would overwrite them): listed below for the operator.",
            f"{len(metadata_lost)} group(s) lose their group metadata record and will rebalance.",
        ] + ([f"KRaft: each node is a broker and a controller voter; stopping it for its trim also stops its "
              f"voter. Before executing, the controller quorum (DescribeQuorum) must keep a majority of voters "
              f"running and caught up while each of {order} is stopped, or the trim refuses to start."]
             if kraft(cluster) else []),
        "rollback": {"how": "fleetctl trim restore RUN (dry run; --execute to act): broker by broker, stop it, move "
                            "its quarantined files back (checksums from the journal; a manifest.json in each "
                            + (f"folder under {quarantine_root}), start it." if quarantine_root else
                               "folder beside each broker's log dir on its host, <log dir>.fleet-quarantine), start "
                               "it."),
                     "dag_id": None, "conf": None},
        "evidence": [{"label": f"partition {p['partition']} broker {r['broker']}", "value": f"{r['verdict']}: "
                      f"{r['reason']}"} for p in trim_plan["partitions"] for r in p["replicas"] if r.get("verdict")],
        "details": {"trim_plan": trim_plan, "order": order, "file_suffixes": list(file_suffixes(cluster.version_tuple)),
                    "controller_quorum": kraft(cluster), "cleaner_fix": {str(k): v for k, v in fixes.items()},
                    "groups": groups, "active_offsets": active, "group_metadata_lost": metadata_lost,
                    "quarantine_root": quarantine_root, "bytes_freed": bytes_freed},
    }


def _over_ssh(cluster, broker: int) -> bool:
    return any(b.id == broker and b.access == "ssh" for b in getattr(cluster, "brokers", ()))


def run_folder(params: dict) -> Path:
    """Where the run's trim plan is read and its broker runbooks are written."""
    from fleetkit.core import settings

    from fleetkit.core.datasets import as_path

    return as_path(settings.under_root(str(params.get("data_root") or settings.data_root()), "reports", "trim",
                                       settings.safe_component(params["_run_id"])))


def quarantine_root(params: dict):
    from fleetkit.core import settings

    return settings.quarantine_root(params.get("data_root") or settings.data_root())


def runbooks(plan: dict, run_id: str) -> dict[int, str]:
    """The shell runbook of each broker of a gate plan (for clusters trimmed with their own
    tooling): the files of each partition into their own quarantine folder, as execute moves them."""
    from fleetkit.core.render import render

    out = {}
    for b in plan["details"]["order"]:
        segs = []
        root = plan["details"]["quarantine_root"]
        for pre in plan["preconditions"][0]["segments"]:
            if pre["broker"] != b:
                continue
            root = pre.get("quarantine_root") or root  # a broker over SSH: on its host
            src = Path(pre["log_dir"]) / f"{OFFSETS_TOPIC}-{int(pre['partition'])}"
            names = [f"{int(s['base_offset']):020d}{suffix}" for s in sorted(pre["segments"], key=lambda s: s["base_offset"])
                     for suffix in plan["details"].get("file_suffixes") or FILE_ORDER]
            # the files that exist here; on a broker host reached over SSH (not looked at while planning)
            # the files every segment has there (.index, .timeindex from 0.10.1, .log)
            segs.append({"folder": quarantine_folder("/", run_id, b, pre["partition"]).name,
                         "files": [str(src / n) for n in names
                                   if (n.endswith((".index", ".timeindex", ".log")) if pre.get("quarantine_root")
                                       else (src / n).exists())]})
        out[b] = render("trim_runbook.sh.j2", plan=plan, digest="(see the approval page)", broker=b, segments=segs,
                        quarantine=str(quarantine_folder(root, run_id, b, 0).parent),
                        fix=plan["details"]["cleaner_fix"].get(str(b)))
    return out


def build(ctx: ClusterContext, params: dict) -> dict:
    """The gate plan of the cluster's trim plan in the run folder; writes runbook-broker-N.sh there."""
    import json

    from fleetkit.core.errors import FleetError

    folder = run_folder(params)
    f = folder / "trim_plan.json"
    if not f.exists():
        raise FleetError(f"{f} does not exist: the trim_plan task did not produce a plan")
    plans_ = [p for p in json.loads(f.read_text()) if p["cluster"] == ctx.cluster.name]
    if not plans_ or not any(r["quarantine"] for p in plans_[0]["partitions"] for r in p["replicas"]):
        raise FleetError(f"nothing to trim on cluster {ctx.cluster.name!r}: no unhealthy partition has a rolled "
                         "segment that can go (the newest rolled and the active segment always stay)")
    leaders, isr = leaders_and_isr(ctx.kafka, ctx.zk)
    trimmed = {r["broker"] for p in plans_[0]["partitions"] for r in p["replicas"] if r["quarantine"]}
    # the deployment's quarantine folder only for brokers on the worker's own disk (an object-store
    # data root has none: FLEET_QUARANTINE_DIR); a broker over SSH quarantines on its host
    root = None if all(_over_ssh(ctx.cluster, b) for b in trimmed) else str(quarantine_root(params))
    plan = gate_plan(ctx.cluster, plans_[0], leaders, isr, root)
    for b, text in runbooks(plan, params["_run_id"]).items():
        (folder / f"runbook-broker-{b}.sh").write_text(text)
    return plan
