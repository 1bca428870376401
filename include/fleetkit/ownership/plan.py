"""Planning the recovery of a group coordinator that does not serve its groups
(runbook_ownership).

The evidence (the facts): the group's __consumer_offsets partition (``resolve_partition``), the
coordinator the cluster names and what it answers vs the partition's leader (live), the
leader/ISR/epoch history (``leader_history``, partition_state dataset), how long the partition's
groups have not been served (``ownership_facts``, the newest ownership report), and the
partition's size and health (``health_facts``, the newest trim_health run).

The actions ``build_plan`` plans (each re-checked right before it runs, fleetkit.ownership.execute,
and verified, fleetkit.ownership.verify):
* move_leader: make another in-sync replica the leader and set the replica order the plan names
  (details.new_order: the target first by default, or the param replica_order, e.g. a rollback's
  order from before); executed exactly as approved (fleetkit.ownership.execute) through the /admin
  znodes on a ZooKeeper-mode cluster, through the Admin API on KRaft (details.via,
  fleetkit.clients.leadership);
* restart_broker: restart the broker that leads the partition (clusters with a broker_control in the
  fleet file only);
* trim_handover: no change here; the runbook starts runbook_trim for the cluster.
"""

from __future__ import annotations

from pathlib import Path

from fleetkit.clients import leadership
from fleetkit.core.partitioning import partition_for
from fleetkit.core.datasets import DataRoot, iso_z, read_jsonl, utcnow
from fleetkit.core.errors import FleetError
from fleetkit.collection.offsets_topic import OFFSETS_TOPIC
from fleetkit.ownership.collect import who
from fleetkit.core.settings import newest_trim_health

#: the runbook whose plans these are; a rollback names it (fleetctl audit rollback triggers it)
DAG_ID = "runbook_ownership"

ACTION = "coordinator_recovery"
ACTIONS = ("move_leader", "restart_broker", "trim_handover")
HISTORY_LIMIT = 10


class RecoveryError(FleetError):
    pass


def _partition_count(zk, kafka) -> int:
    if zk is not None:
        parts = zk.topic_partitions(OFFSETS_TOPIC)
        if parts:
            return max(parts) + 1
    md = kafka.metadata([OFFSETS_TOPIC])
    parts = [p for (t, p) in md.partitions if t == OFFSETS_TOPIC]
    if not parts:
        raise RecoveryError(f"cluster {kafka.name!r} has no {OFFSETS_TOPIC} topic")
    return max(parts) + 1


def resolve_partition(group: str | None, partition, count: int) -> int:
    group = (group or "").strip() or None
    if partition in (None, "", -1, "-1"):
        partition = None
    if partition is not None:
        try:
            partition = int(partition)
        except (TypeError, ValueError):
            raise RecoveryError(f"param partition {partition!r} is not a number") from None
        if not 0 <= partition < count:
            raise RecoveryError(f"param partition {partition} is outside 0..{count - 1} ({OFFSETS_TOPIC} has {count})")
    if group is not None:
        p = partition_for(group, count)
        if partition is not None and partition != p:
            raise RecoveryError(f"group {group!r} is coordinated through partition {p}, not the partition {partition} "
                                "given: give one of them, or both consistently")
        return p
    if partition is None:
        raise RecoveryError("give a group or a partition of __consumer_offsets (params group / partition)")
    return partition


def parse_replica_order(value, replicas: list[int], partition: int) -> list[int] | None:
    """The param replica_order ('3,1,2', or a list): a reordering of the partition's replicas;
    None when not given."""
    if value in (None, "", []):
        return None
    items = value if isinstance(value, (list, tuple)) else str(value).replace(" ", "").split(",")
    try:
        order = [int(b) for b in items]
    except (TypeError, ValueError):
        raise RecoveryError(f"param replica_order {value!r} is not a comma-separated list of broker ids") from None
    if sorted(order) != sorted(replicas):
        raise RecoveryError(f"param replica_order {order} is not a reordering of the replicas {replicas} of "
                            f"{OFFSETS_TOPIC}-{partition}")
    return order


def leader_history(root: DataRoot, cluster: str, partition: int, limit: int = HISTORY_LIMIT) -> list[dict]:
    """The leader-epoch changes of one partition seen in the partition_state dataset, newest last."""
    from fleetkit.core.datasets import read_dataset

    try:
        table = read_dataset(root, "partition_state")
    except Exception:  # noqa: BLE001 - no dataset yet: no history to show
        return []
    rows = [r for r in table.to_pylist()
            if r["cluster"] == cluster and r["topic"] == OFFSETS_TOPIC and r["partition"] == partition]
    rows.sort(key=lambda r: r["observed_at"])
    out, prev = [], None
    for r in rows:
        if prev is None or (r["leader_epoch"], r["leader"]) != (prev["leader_epoch"], prev["leader"]):
            out.append({"first_seen": iso_z(r["observed_at"]), "leader": r["leader"], "isr": list(r["isr"] or []),
                        "leader_epoch": r["leader_epoch"]})
        prev = r
    return out[-limit:]


def ownership_facts(report_dir: Path, cluster: str, partition: int) -> tuple[dict | None, list[str]]:
    """(the partition's row of the newest ownership report, its affected groups)."""
    for p in read_jsonl(report_dir / "partitions.jsonl"):
        if p["cluster"] == cluster and p["partition"] == partition:
            return p, list(p.get("affected_groups") or [])
    return None, []


def health_facts(data_root: Path, cluster: str, partition: int) -> list[dict]:
    newest = newest_trim_health(data_root)
    return [{"broker": h["broker"], "disk_bytes": h.get("disk_bytes"), "verdict": h.get("verdict"),
             "records": h.get("records")}
            for h in (read_jsonl(newest) if newest else [])
            if h.get("cluster") == cluster and h.get("partition") == partition]


def evidence_folder(data_root: str, run_id: str | None) -> Path:
    """The ownership report a recovery plan cites: the ownership run `run_id`'s folder
    under <data root>/reports/coordinator (its id made one path component, so no value leaves that
    folder), or the newest (`latest`) when none is given. A run id, never a path: a trigger param
    must not point the plan at files of its choosing."""
    from fleetkit.core.datasets import as_path
    from fleetkit.core.settings import run_folder, under_root

    base = as_path(under_root(str(data_root), "reports", "coordinator"))
    return run_folder(base, run_id) if run_id else base / "latest"


def build_plan(cluster, kafka, zk, data_root: str, params: dict, lab_control=None) -> dict:
    if params.get("evidence_report"):
        raise RecoveryError("param evidence_report (a folder) is gone: give evidence_run, the ownership "
                            "run whose report the plan cites (empty: the newest)")
    action = params.get("action") or "move_leader"
    if action not in ACTIONS:
        raise RecoveryError(f"param action {action!r} is not one of {', '.join(ACTIONS)}")
    # ZooKeeper-mode clusters: partition state znodes and /admin znodes; KRaft: Metadata and the Admin API
    admin = leadership.for_cluster(kafka, zk)
    via = "zookeeper" if zk is not None else "admin_api"
    count = _partition_count(zk, kafka)
    partition = resolve_partition(params.get("group"), params.get("partition"), count)
    state = leadership.state(admin, OFFSETS_TOPIC, partition)
    replicas = leadership.assignment(admin, OFFSETS_TOPIC)[partition]
    root = str(data_root)
    report_dir = evidence_folder(root, params.get("evidence_run"))
    owned, affected = ownership_facts(report_dir, cluster.name, partition)
    groups = list(dict.fromkeys(([params["group"]] if params.get("group") else []) + affected))[:20]
    live = who(kafka, zk, groups) if groups else []
    history = leader_history(DataRoot(root), cluster.name, partition)
    health = health_facts(root, cluster.name, partition)

    evidence = [
        {"label": "partition", "value": f"{OFFSETS_TOPIC}-{partition} (of {count})"},
        {"label": "leader / ISR / epoch now",
         "value": f"{state.leader} / {list(state.isr)} / {state.leader_epoch} (from "
                  f"{'ZooKeeper' if via == 'zookeeper' else 'metadata'})"},
        {"label": "replicas (preferred first)", "value": str(replicas)},
    ]
    for r in live:
        evidence.append({"label": f"group {r['group']}",
                         "value": f"expected coordinator {r['leader']}, named {r['coordinator_id']}, answers "
                                  f"{r['error'] or r['state']}: {r['verdict']}"})
    for h in history:
        evidence.append({"label": f"leader since {h['first_seen']}",
                         "value": f"broker {h['leader']}, epoch {h['leader_epoch']}, ISR {h['isr']}"})
    if owned:
        evidence.append({"label": "ownership check", "value":
                         f"{owned['verdict']}; not served for {owned.get('not_ok_seconds')} s since "
                         f"{owned.get('last_change_at') or owned.get('not_ok_since')}; groups {owned.get('groups')} "
                         f"(loading {owned.get('loading')}, unavailable {owned.get('unavailable')})"})
    for h in health:
        evidence.append({"label": f"size on broker {h['broker']}",
                         "value": f"{h['disk_bytes']} bytes, {h['records']} records, health {h['verdict']}"})

    plan = {"action": ACTION, "cluster": cluster.name, "created_at": iso_z(utcnow()), "evidence": evidence,
            "details": {"recovery_action": action, "via": via, "partition": partition, "groups": groups,
                        "leader": state.leader if state else None, "leader_epoch": state.leader_epoch if state else None,
                        "isr": list(state.isr) if state else [], "replicas": replicas}}
    pre_state = {"what": f"{OFFSETS_TOPIC}-{partition} still has leader {state.leader if state else '?'} at epoch "
                         f"{state.leader_epoch if state else '?'} (otherwise the situation changed: plan again)"}
    if action == "move_leader":
        order = parse_replica_order(params.get("replica_order"), replicas, partition)
        candidates = [b for b in (list(state.isr)) if b != state.leader]
        target = params.get("target_broker")
        if target not in (None, "", -1, "-1"):
            target = int(target)
        elif order is not None:
            target = order[0]
        else:
            target = candidates[0] if candidates else None
        if target is None:
            raise RecoveryError(f"{OFFSETS_TOPIC}-{partition} has no other in-sync replica than its leader "
                                f"{state.leader} (ISR {list(state.isr)}): nothing to move leadership to")
        new_order = order if order is not None else [target] + [b for b in replicas if b != target]
        if target not in state.isr or (target == state.leader and new_order == replicas):
            raise RecoveryError(f"target broker {target} is not another in-sync replica of {OFFSETS_TOPIC}-{partition} "
                                f"(leader {state.leader}, ISR {list(state.isr)})")
        moves = target != state.leader
        plan.update(
            title=(f"Move leadership of {OFFSETS_TOPIC}-{partition} from broker {state.leader} to broker {target}"
                   if moves else f"Set the replica order of {OFFSETS_TOPIC}-{partition} to {new_order} "
                                 f"(leader {state.leader} stays)"),
            changes=[{"target": f"{OFFSETS_TOPIC}-{partition} replica order", "before": str(replicas),
                      "after": str(new_order)},
                     {"target": f"{OFFSETS_TOPIC}-{partition} leader", "before": f"broker {state.leader}",
                      "after": f"broker {target}"}],
            preconditions=[pre_state, {"what": f"the replica order is still {replicas} (the order approved is "
                                               f"set exactly: {new_order})"},
                           {"what": f"broker {target} is in the ISR"},
                           {"what": "no reassignment or election in progress (/admin znodes absent)" if via == "zookeeper"
                            else "no partition reassignment in progress (ListPartitionReassignments is empty)"}],
            risks=[f"broker {target} must load the partition before it serves its groups (they see "
                   "NOT_COORDINATOR meanwhile); if the partition is bloated, trim it first (action trim_handover)",
                   "keep auto.leader.rebalance.enable=false, or the controller moves leadership back to the "
                   "first replica of the order" + ("" if new_order[0] == target else
                                                   f" (broker {new_order[0]} here, not the new leader {target})")],
            rollback={"how": f"run this runbook again with action move_leader, target_broker {state.leader} and "
                             f"replica_order {','.join(map(str, replicas))}: leadership back to broker "
                             f"{state.leader} and the replica order before ({replicas}) restored exactly",
                      "dag_id": DAG_ID,
                      "conf": {"cluster": cluster.name, "partition": partition, "action": "move_leader",
                               "target_broker": state.leader, "replica_order": ",".join(map(str, replicas))}})
        plan["details"].update(target=target, new_order=new_order)
    elif action == "restart_broker":
        target = params.get("target_broker")
        target = int(target) if target not in (None, "", -1, "-1") else state.leader
        if lab_control is None:
            raise RecoveryError(f"cluster {cluster.name!r} has no broker_control in the fleet file: restart broker "
                                f"{target} with your service manager, then run the ownership check")
        plan.update(
            title=f"Restart broker {target} (leader of {OFFSETS_TOPIC}-{partition})",
            changes=[{"target": f"broker {target}", "before": "running", "after": "restarted"}],
            preconditions=[pre_state, {"what": f"broker {target} is registered in "
                                               f"{'ZooKeeper' if via == 'zookeeper' else 'the metadata'}"}]
            + ([] if via == "zookeeper" else [
                {"what": f"KRaft: with node {target} stopped, a majority of the controller quorum's voters stays "
                         "running and caught up (DescribeQuorum; a combined node is a voter too)"}]),
            risks=[f"while broker {target} is down, every partition it leads moves to another ISR replica, which "
                   "loads it first (their groups see NOT_COORDINATOR meanwhile)"],
            rollback={"how": "nothing to roll back: a restart changes no data", "conf": None})
        plan["details"].update(target=target)
    else:
        plan.update(
            title=f"Hand {OFFSETS_TOPIC}-{partition} over to runbook_trim",
            changes=[], preconditions=[], risks=["the trim runbook plans and asks for its own approval"],
            rollback={"how": "nothing changes here", "conf": None})
    return plan
