"""Executing a coordinator recovery plan (fleetkit.ownership.plan): ``check`` re-checks the plan's
preconditions right before it runs (the partition's leader, epoch and replica order unchanged, the
target still in the ISR and no admin operation in progress, or the broker to restart still
registered), and ``execute`` moves leadership or restarts the broker.

A move sets exactly the replica order the plan holds (details.new_order, what was approved; never
recomputed here) and makes details.target the leader: when the target leads already, the order
is set and nothing is elected; otherwise the replicas are first reordered with the target first
and a preferred-replica election run, then, when the approved order starts with another broker
(a rollback restoring the order from before), the replicas are reordered once more (the leader
stays). Each step is journaled (fleetkit.core.journal: intent before, outcome after)."""

from __future__ import annotations

import os
import time

from fleetkit.clients import leadership
from fleetkit.clients.broker_control import stop_problems
from fleetkit.collection.offsets_topic import OFFSETS_TOPIC
from fleetkit.core.journal import Journal
from fleetkit.ownership.plan import RecoveryError


def check(zk, plan: dict) -> list[str]:
    """`zk`: what moves leadership on the cluster (fleetkit.clients.leadership.for_cluster: its
    ZooKeeperCluster, or an AdminLeadership on KRaft)."""
    d = plan["details"]
    action = d["recovery_action"]
    if action == "trim_handover":
        return []
    problems = []
    st = leadership.state(zk, OFFSETS_TOPIC, d["partition"])
    if (st.leader, st.leader_epoch) != (d["leader"], d["leader_epoch"]):
        problems.append(f"{OFFSETS_TOPIC}-{d['partition']} changed since the plan: leader {d['leader']} epoch "
                        f"{d['leader_epoch']} then, leader {st.leader} epoch {st.leader_epoch} now")
    if action == "move_leader":
        now = leadership.assignment(zk, OFFSETS_TOPIC).get(d["partition"])
        if now != d["replicas"]:
            problems.append(f"the replica assignment of {OFFSETS_TOPIC}-{d['partition']} changed since the plan: "
                            f"{d['replicas']} then, {now} now")
        if d["target"] not in st.isr:
            problems.append(f"broker {d['target']} is no longer in the ISR {list(st.isr)}")
        busy = leadership.busy(zk)
        if busy:
            problems.append(f"admin operations in progress: {', '.join(busy)}")
    elif action == "restart_broker":
        if d["target"] not in zk.broker_ids():
            problems.append(f"broker {d['target']} is not registered in the cluster (already down?)")
        elif isinstance(zk, leadership.AdminLeadership):  # KRaft: the node may be a controller voter
            problems += stop_problems(zk.kafka, [d["target"]])
    return problems


def move(zk, plan: dict, journal_path: str | os.PathLike | None = None, timeout: float = 60.0) -> dict:
    """Set the approved replica order and leader (see the module), refusing when the live
    assignment, leader or epoch differ from the plan's."""
    d = plan["details"]
    p, target, order = d["partition"], d["target"], list(d["new_order"])
    name = f"{OFFSETS_TOPIC}-{p}"
    problems = check(zk, plan)
    if problems:
        raise RecoveryError("refused, nothing changed: " + "; ".join(problems))
    before = leadership.state(zk, OFFSETS_TOPIC, p)
    current = list(d["replicas"])
    seq = 0
    with Journal(journal_path) as journal:
        if before.leader != target:
            lead_first = [target] + [b for b in order if b != target]
            if current != lead_first:
                journal.step(seq, lambda: leadership.reorder_replicas(zk, OFFSETS_TOPIC, p, lead_first, timeout),
                      step="reorder_replicas", partition=name, before=current, after=lead_first)
                current, seq = lead_first, seq + 1

            def elect():
                leadership.preferred_election(zk, [(OFFSETS_TOPIC, p)], timeout)
                deadline = time.monotonic() + timeout
                st = leadership.state(zk, OFFSETS_TOPIC, p)
                while st.leader != target and time.monotonic() < deadline:
                    time.sleep(0.2)
                    st = leadership.state(zk, OFFSETS_TOPIC, p)
                if st.leader != target:
                    raise RecoveryError(f"{name} leader is {st.leader} after the election, not {target}")
                return {"leader_after": st.leader, "epoch_after": st.leader_epoch}

            journal.step(seq, elect, step="preferred_election", partition=name, leader_before=before.leader,
                  target=target)
            seq += 1
        if current != order:
            journal.step(seq, lambda: leadership.reorder_replicas(zk, OFFSETS_TOPIC, p, order, timeout),
                  step="reorder_replicas", partition=name, before=current, after=order)
    after = leadership.state(zk, OFFSETS_TOPIC, p)
    return {"replicas_before": d["replicas"], "replicas_after": leadership.assignment(zk, OFFSETS_TOPIC).get(p),
            "leader_before": before.leader, "leader_after": after.leader, "epoch_before": before.leader_epoch,
            "epoch_after": after.leader_epoch}


def execute(zk, plan: dict, lab_control=None, journal_path: str | os.PathLike | None = None) -> dict:
    d = plan["details"]
    action = d["recovery_action"]
    if action == "move_leader":
        return move(zk, plan, journal_path)
    if action == "restart_broker":
        if lab_control is None:
            raise RecoveryError("no broker_control in the fleet file: the broker cannot be restarted from here")
        t0 = time.monotonic()
        with Journal(journal_path) as journal:
            for seq, step, fn in ((0, "stop_broker", lab_control.stop), (1, "start_broker", lab_control.start)):
                journal.step(seq, lambda fn=fn: fn(d["target"]) and None, step=step, broker=d["target"])
        return {"restarted": d["target"], "seconds": round(time.monotonic() - t0, 1)}
    return {"handover": "runbook_trim", "partition": d["partition"]}
