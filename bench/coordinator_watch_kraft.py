"""Benchmark: how fast the leader-change watch reports a __consumer_offsets leader change on a
KRaft cluster (Kafka 4.3.1, no ZooKeeper: the trigger polls Metadata leader epochs every 2 s).

    .venv/bin/python bench/coordinator_watch_kraft.py [--moves 10]

Starts its own 3-node KRaft lab (combined broker+controller nodes on 127.0.0.1, the "bench" slot
of fleetlab/ports.py's test plan, folder .lab-bench-kraft, stopped by PID at the end; not at the
same time as bench/coordinator_watch.py, which uses that slot too) and runs `LeaderChangeTrigger`
exactly as the Airflow triggerer does (its async generator, in this process). Then:
* `--moves` leadership moves through the Admin API (AlterPartitionReassignments + preferred
  leader election), one partition each;
* one controlled broker stop (every partition it leads moves at once).
Prints, per change, the seconds from the change to the trigger's event (the triggerer turns the
event into the asset event at once). Target: at most 10 s; expected: under the 2 s poll interval
plus the 0.5 s debounce.
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
sys.path[:0] = [str(REPO / "include"), str(REPO / "plugins"), str(REPO)]
OFFSETS = "__consumer_offsets"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--moves", type=int, default=10)
    args = ap.parse_args()
    import yaml

    from fleetkit.clients import leadership, wire
    from fleetkit.clients.kafka import KafkaCluster, client_config
    from fleetlab import ports
    from fleetlab.lab import Lab, LabSpec

    spec = LabSpec(lab_dir=str(REPO / ".lab-bench-kraft"), name="benchkraft", kafka_version="4.3.1",
                   **ports.tests().cluster("bench"))
    os.environ.update(spec.connection_env())
    lab = Lab(spec)
    t = time.monotonic()
    lab.up()
    print(f"KRaft lab up in {time.monotonic() - t:.0f}s ({spec.bootstrap})", flush=True)
    fleet_file = Path(tempfile.mkdtemp(prefix="bench-watch-kraft-")) / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(spec.fleet_document(), sort_keys=False))
    kafka = KafkaCluster("benchkraft", client_config({"bootstrap.servers": spec.bootstrap}, spec.kafka_version))
    try:
        wire.probe(spec.bootstrap, ["bench-watch"])  # a coordinator lookup creates __consumer_offsets
        admin = leadership.AdminLeadership(kafka)
        deadline = time.monotonic() + 120
        while True:
            try:
                parts = admin.assignment(OFFSETS)
                if len(parts) >= 50 and all(admin.state(OFFSETS, p).leader >= 0 for p in (0, 49)):
                    break
            except Exception:  # noqa: BLE001 - the topic is being created
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{OFFSETS} did not get leaders within 120 s")
            time.sleep(1)
        leadership.elect_preferred_leaders(admin, OFFSETS)
        latencies = asyncio.run(scenario(admin, str(fleet_file), lab, args.moves))
    finally:
        kafka.close()
        lab.down()
    print(f"RESULT KRaft metadata-poll watch latency over {len(latencies)} changes: median "
          f"{statistics.median(latencies):.2f}s, max {max(latencies):.2f}s {'<=' if max(latencies) <= 10 else '>'} 10s")
    return 0


async def scenario(admin, fleet_file: str, lab, moves: int) -> list[float]:
    from coordinator_watch import run_moves  # bench/ is this script's folder

    from fleet_airflow.triggers.leader_change import LeaderChangeTrigger

    trigger = LeaderChangeTrigger(cluster="benchkraft", fleet_file=fleet_file)
    return await run_moves(admin, trigger, lab, moves, settle=2.5)


if __name__ == "__main__":
    raise SystemExit(main())
