"""Benchmark: `fleetctl lag` of 50 groups against Kafka's `kafka-consumer-groups --describe` on the
same groups (target: fleetctl <= 2 s, whole process).

    FLEET_TEST_PORT_OFFSET=3000 .venv/bin/python bench/cli_lag.py --cluster lab [--groups 50] [--runs 3]

Starts the benchmark's own lab of the cluster's generation (the `bench` slot of the tests' port plan,
.lab-bench-collect/<cluster>), creates --groups topics of 3 partitions and one group per topic with
a live classic member (kept polling), then times, --runs times each, the whole processes of:

* `fleetctl lag G1 ... GN --cluster bench-<cluster>` (connection as an AIRFLOW_CONN_ JSON
  variable, an empty data root: the verdicts come from this read alone);
* Kafka's own tool on the same groups: on 3.9/4.x `kafka-consumer-groups --describe --group G1 ...
  --group GN` from the pinned kafka-tools jars (one JVM); on 0.9, whose tool takes one group,
  `kafka-consumer-groups.sh --new-consumer --describe --group G` once per group (as an operator
  would have to).

Prints the medians and the ratio, and checks both list the same CURRENT-OFFSET for every partition.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "include"), str(REPO / "plugins"), str(REPO)]

from collect_offsets import _join_and_commit, bench_lab, create_topics  # noqa: E402
from fleetlab import dists  # noqa: E402

TARGET = 2.0


def kafka_tool(version: str, bootstrap: str, groups: list[str]) -> list[list[str]]:
    """The argv(s) of Kafka's own describe of `groups` on this generation."""
    home = dists.dist_dir(version)
    if version.startswith("0."):
        script = str(home / "bin" / "kafka-consumer-groups.sh")
        return [[script, "--new-consumer", "--bootstrap-server", bootstrap, "--describe", "--group", g] for g in groups]
    java = shutil.which("java") or "java"
    argv = [java, "-Xmx256m", "-cp", f"{home / 'libs'}/*", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server", bootstrap, "--describe"]
    for g in groups:
        argv += ["--group", g]
    return [argv]


def timed(argvs: list[list[str]], env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = []
    for argv in argvs:
        p = subprocess.run(argv, capture_output=True, text=True, env=env)
        if p.returncode not in (0, 3):
            raise SystemExit(f"{' '.join(argv[:6])} ... failed ({p.returncode}):\n{p.stderr[-3000:]}")
        out.append(p.stdout)
    return time.perf_counter() - t0, "".join(out)


def offsets_in(text: str, groups: set[str]) -> dict[tuple[str, str, int], str]:
    """(group, topic, partition) -> CURRENT-OFFSET from a describe table (either tool's)."""
    found = {}
    for line in text.splitlines():
        cells = line.replace(",", " ").split()  # 0.9 separates its columns with ", "
        if len(cells) >= 4 and cells[0] in groups and cells[2].isdigit():
            found[(cells[0], cells[1], int(cells[2]))] = cells[3]
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="lab", help="lab (0.9), lab39 or lab43: the generation to measure")
    p.add_argument("--groups", type=int, default=50)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--keep", action="store_true", help="leave the lab running")
    args = p.parse_args()
    lab, version = bench_lab(args.cluster)
    print(f"starting the benchmark lab of Kafka {version} in {lab.spec.path} ...", flush=True)
    lab.up()
    members = []
    stop = threading.Event()
    try:
        bootstrap = lab.spec.bootstrap
        topics = create_topics(bootstrap, version, args.groups)
        groups = [f"lagbench-{t}" for t in topics]
        t = time.monotonic()
        with ThreadPoolExecutor(10) as pool:
            members = list(pool.map(lambda gt: _join_and_commit(bootstrap, version, gt[0], gt[1], "classic"),
                                    zip(groups, topics)))
        print(f"prepare: {len(groups)} groups with a live member each in {time.monotonic() - t:.0f}s", flush=True)

        def keep_polling():
            while not stop.is_set():
                for c in members:
                    c.poll(0)
                time.sleep(0.5)

        threading.Thread(target=keep_polling, daemon=True).start()

        tmp = Path(tempfile.mkdtemp(prefix="bench-cli-lag-"))
        import yaml

        entry = lab.spec.fleet_cluster()
        entry["approvers"] = ["a", "b"]
        (tmp / "fleet.yaml").write_text(yaml.safe_dump({"version": 1, "clusters": [entry]}))
        env = dict(os.environ, FLEET_FILE=str(tmp / "fleet.yaml"), FLEET_DATA_ROOT=str(tmp / "data"),
                   **{f"AIRFLOW_CONN_{lab.spec.kafka_conn_id.upper()}": json.dumps(
                       {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}})})
        ours_argv = [[str(REPO / ".venv" / "bin" / "fleetctl"), "lag", *groups, "--cluster", lab.spec.name]]
        theirs_argv = kafka_tool(version, bootstrap, groups)
        timed(ours_argv, env)  # warm-up (disk caches), like the JVM's below
        timed(theirs_argv[:1], env)
        ours, theirs = [], []
        for _ in range(args.runs):
            s, ours_out = timed(ours_argv, env)
            ours.append(s)
            s, theirs_out = timed(theirs_argv, env)
            theirs.append(s)
        a, b = offsets_in(ours_out, set(groups)), offsets_in(theirs_out, set(groups))
        same = sum(1 for k in a if a[k] == b.get(k))
        print(f"rows: fleetctl {len(a)}, kafka-consumer-groups {len(b)}, same CURRENT-OFFSET {same}")
        mo, mt = statistics.median(ours), statistics.median(theirs)
        how = "one JVM" if len(theirs_argv) == 1 else f"{len(theirs_argv)} JVMs, one per group"
        print(f"fleetctl lag, {len(groups)} groups: median {mo:.2f}s (min {min(ours):.2f}, "
              f"max {max(ours):.2f}) {'ok' if mo <= TARGET else 'OVER'} (target {TARGET}s)")
        print(f"kafka-consumer-groups --describe ({how}): median {mt:.2f}s (min {min(theirs):.2f}, max {max(theirs):.2f})")
        print(f"RESULT Kafka {version}: fleetctl {mo:.2f}s vs kafka-consumer-groups {mt:.2f}s, ratio {mt / mo:.1f}x "
              f"(kafka-consumer-groups time / fleetctl time)")
        return 0 if mo <= TARGET and len(a) == 3 * len(groups) and same == len(a) else 1
    finally:
        stop.set()
        for c in members:
            c.close()
        if not args.keep:
            for line in lab.down():
                print(line)


if __name__ == "__main__":
    sys.exit(main())
