"""Verifying a coordinator recovery: the new leader and the approved replica order (or the
restarted broker back in the ISR), and every group of the plan served by its partition's leader
again."""

from __future__ import annotations

import time

from fleetkit.clients import leadership
from fleetkit.collection.offsets_topic import OFFSETS_TOPIC
from fleetkit.ownership.collect import who
from fleetkit.ownership.rules import OK


def verify(kafka, zk, plan: dict, timeout: float = 120.0) -> list[str]:
    """The action's effect: the new leader (or the restarted broker back in the ISR), and every
    group of the plan served by its partition's leader again (waits up to `timeout` for the load)."""
    d = plan["details"]
    action = d["recovery_action"]
    if action == "trim_handover":
        return []
    admin = leadership.for_cluster(kafka, zk)
    deadline = time.monotonic() + timeout
    problems: list[str] = []
    while True:
        problems = []
        st = leadership.state(admin, OFFSETS_TOPIC, d["partition"])
        if action == "move_leader" and st.leader != d["target"]:
            problems.append(f"leader of {OFFSETS_TOPIC}-{d['partition']} is {st.leader}, not {d['target']}")
        if action == "move_leader":
            order = leadership.assignment(admin, OFFSETS_TOPIC).get(d["partition"])
            if order != d["new_order"]:
                problems.append(f"replica order of {OFFSETS_TOPIC}-{d['partition']} is {order}, not the approved "
                                f"{d['new_order']}")
        if action == "restart_broker" and d["target"] not in st.isr:
            problems.append(f"broker {d['target']} is not back in the ISR {list(st.isr)}")
        if d["groups"]:
            for r in who(kafka, zk, d["groups"]):
                if r["verdict"] != OK:
                    problems.append(f"group {r['group']!r} is {r['verdict']} ({r['error'] or r['state']})")
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(1)
