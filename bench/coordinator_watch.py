"""Benchmark: how fast the leader-change watch reports a __consumer_offsets leader change.

    .venv/bin/python bench/coordinator_watch.py [--moves 10]

Starts its own 3-broker lab (Kafka 0.9.0.1 + ZooKeeper on 127.0.0.1, ports 12681 / 19592-19594,
folder .lab-bench, stopped by PID at the end) and runs `LeaderChangeTrigger` exactly as the Airflow
triggerer does (its async generator, in this process). Then:
* `--moves` leadership moves (reassignment + preferred-replica election), one partition each;
* one controlled broker stop (every partition it leads moves at once);
* one ZooKeeper session expiry followed by a move (the watch must re-arm on the new session).
Prints, per change, the seconds from the change to the trigger's event. Target: the
check starts within 10 s of a leader change; the scheduler adds its own loop delay on top (the
end-to-end figure is printed by tests/ui/test_coordinator_watch.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "include"), str(REPO / "plugins")]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--moves", type=int, default=10)
    args = ap.parse_args()
    import yaml

    from fleetkit.clients import leadership
    from fleetlab.lab import Lab, LabSpec
    from fleetkit.clients.zookeeper import ZooKeeperCluster

    from fleetlab import ports

    spec = LabSpec(lab_dir=str(REPO / ".lab-bench"), name="bench", **ports.tests().cluster("bench"))
    os.environ.update(spec.connection_env())
    lab = Lab(spec)
    t = time.monotonic()
    lab.up()
    print(f"lab up in {time.monotonic() - t:.0f}s", flush=True)
    fleet_file = Path(tempfile.mkdtemp(prefix="bench-watch-")) / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(spec.fleet_document(), sort_keys=False))
    zk = ZooKeeperCluster("bench", f"127.0.0.1:{spec.zk_port}", "/kafka")
    zk.start()
    try:
        leadership.elect_preferred_leaders(zk, "__consumer_offsets")
        latencies = asyncio.run(scenario(zk, str(fleet_file), lab, args.moves))
    finally:
        zk.stop()
        lab.down()
    print(f"RESULT watch latency over {len(latencies)} changes: median {statistics.median(latencies):.2f}s, "
          f"max {max(latencies):.2f}s {'<=' if max(latencies) <= 10 else '>'} 10s")
    return 0


async def run_moves(handle, trigger, lab, moves: int, settle: float = 2.0, after_restart=None) -> list[float]:
    """Start `trigger`, then time change -> event for `moves` leader moves and one controlled broker
    stop (`handle`: what fleetkit.clients.leadership acts through, ZooKeeper or the Admin API).
    `after_restart(measure, mover)` adds changes once the stopped broker is back."""
    from fleetkit.clients import leadership

    events = trigger.run()
    pending = asyncio.ensure_future(events.__anext__())
    await asyncio.sleep(settle)
    out = []

    async def measure(label: str, change) -> None:
        nonlocal pending
        t0 = time.monotonic()
        await asyncio.to_thread(change)
        ev = await asyncio.wait_for(pending, timeout=60)
        dt_ = time.monotonic() - t0
        out.append(dt_)
        print(f"{label}: event {dt_:.2f}s after the change started, partitions "
              f"{[c['partition'] for c in ev.payload['changes']]}", flush=True)
        pending = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(1.5)  # let the controller settle before the next change

    def mover(p):
        def move():
            st = leadership.state(handle, "__consumer_offsets", p)
            leadership.move_leader(handle, "__consumer_offsets", p, next(b for b in st.isr if b != st.leader))
        return move

    for i in range(moves):
        await measure(f"move {i + 1} (partition {i})", mover(i))
    victim = leadership.state(handle, "__consumer_offsets", 20).leader
    await measure(f"stop broker {victim} (controlled shutdown)", lambda: lab.stop_broker(victim))
    await asyncio.to_thread(lab.start_broker, victim)
    if after_restart is not None:
        await after_restart(measure, mover)
    pending.cancel()
    try:
        await pending
    except (asyncio.CancelledError, StopAsyncIteration):
        pass
    await events.aclose()
    return out


async def scenario(zk, fleet_file: str, lab, moves: int) -> list[float]:
    from fleet_airflow.triggers.leader_change import LeaderChangeTrigger
    from fleetlab.lab import expire_zk_session

    trigger = LeaderChangeTrigger(cluster="bench", fleet_file=fleet_file, reconcile_seconds=600)

    async def session_loss(measure, mover) -> None:
        await asyncio.sleep(3)
        expire_zk_session(trigger.watch.zk.client, lab.spec.zk_hosts)
        deadline = time.monotonic() + 30
        while trigger.watch.sessions < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        print(f"ZooKeeper session expired and re-established (sessions: {trigger.watch.sessions})", flush=True)
        await measure("move after session loss (partition 30)", mover(30))

    return await run_moves(zk, trigger, lab, moves, after_restart=session_loss)


if __name__ == "__main__":
    raise SystemExit(main())
