"""Executing a coordinator recovery plan (fleetkit.ownership.plan): ``check`` re-checks the plan's
preconditions right before it runs (the partition's leader and epoch unchanged, the target still
in the ISR and no admin operation in progress, or the broker to restart still registered), and
``execute`` moves leadership or restarts the broker."""

from __future__ import annotations

import time

from fleetkit.clients import leadership
from fleetkit.collection.offsets_topic import OFFSETS_TOPIC
from fleetkit.ownership.plan import RecoveryError


def check(zk, plan: dict) -> list[str]:
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
        if d["target"] not in st.isr:
            problems.append(f"broker {d['target']} is no longer in the ISR {list(st.isr)}")
        busy = leadership.busy(zk)
        if busy:
            problems.append(f"admin operations in progress: {', '.join(busy)}")
    elif action == "restart_broker":
        if d["target"] not in zk.broker_ids():
            problems.append(f"broker {d['target']} is not registered in ZooKeeper (already down?)")
    return problems


def execute(zk, plan: dict, lab_control=None) -> dict:
    d = plan["details"]
    action = d["recovery_action"]
    if action == "move_leader":
        return leadership.move_leader(zk, OFFSETS_TOPIC, d["partition"], d["target"])
    if action == "restart_broker":
        if lab_control is None:
            raise RecoveryError("no broker_control in the fleet file: the broker cannot be restarted from here")
        t0 = time.monotonic()
        lab_control.stop(d["target"])
        lab_control.start(d["target"])
        return {"restarted": d["target"], "seconds": round(time.monotonic() - t0, 1)}
    return {"handover": "runbook_offsets_trim", "partition": d["partition"]}
