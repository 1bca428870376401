"""Peak memory of a command and of everything it starts: the lab fleet, Airflow, Spark, PostgreSQL.

    python bench/peak_memory.py -- make demo
    python bench/peak_memory.py -- make test

Lab processes are started detached (their own sessions, PID files), so they are not children of
the command: every second this samples the command's process tree plus every process whose command
line or working folder lies in this repository, sums their resident memory (RSS), and keeps the
peak, with what made it up at that moment (Kafka brokers by generation, ZooKeeper, Airflow, Spark,
PostgreSQL, Redis, other). It also prints the machine's memory in use (MemTotal - MemAvailable)
above what it was at the start, which counts page cache pressure the RSS sum does not.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def category(cmdline: str) -> str:
    if "kafka.Kafka" in cmdline:
        for version in ("0.9.0.1", "3.9.2", "4.3.1"):
            if f"kafka-{version}/" in cmdline:
                return f"kafka {version} brokers"
        return "kafka brokers"
    if "QuorumPeerMain" in cmdline:
        return "zookeeper"
    if "org.apache.spark" in cmdline or "pyspark" in cmdline:
        return "spark"
    if "postgres" in cmdline.split(" ", 1)[0]:
        return "postgresql"
    if "redis-server" in cmdline:
        return "redis"
    if "airflow" in cmdline or "celery" in cmdline:
        return "airflow"
    if "pytest" in cmdline:
        return "pytest"
    return "other"


def machine_used_mb() -> float:
    vm = psutil.virtual_memory()
    return (vm.total - vm.available) / 2**20


def sample(root_pid: int, repo: str = str(REPO)) -> dict[int, tuple[str, float]]:
    """pid -> (category, RSS MiB) of the command's tree and the repository's processes."""
    found: dict[int, tuple[str, float]] = {}
    try:
        tree = [psutil.Process(root_pid)] + psutil.Process(root_pid).children(recursive=True)
    except psutil.Error:
        tree = []
    tree_pids = {p.pid for p in tree}
    for p in psutil.process_iter(["pid", "cmdline", "cwd", "memory_info"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            mine = p.pid in tree_pids or repo in cmd or (p.info["cwd"] or "").startswith(repo)
            if mine and p.info["memory_info"] is not None and p.pid != psutil.Process().pid:
                found[p.pid] = (category(cmd), p.info["memory_info"].rss / 2**20)
        except psutil.Error:
            continue
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--root", default=str(REPO), help="the checkout whose processes count (default: this one); "
                                                      "the command runs there")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")
    args = ap.parse_args()
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not argv:
        ap.error("give the command after --, e.g. -- make demo")
    base_used = machine_used_mb()
    peak_total, peak_parts, peak_machine = 0.0, {}, 0.0
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=args.root)
    stop = threading.Event()

    def loop():
        nonlocal peak_total, peak_parts, peak_machine
        while not stop.is_set():
            procs = sample(proc.pid, str(Path(args.root).resolve()))
            total = sum(rss for _, rss in procs.values())
            if total > peak_total:
                parts: dict[str, float] = {}
                for cat, rss in procs.values():
                    parts[cat] = parts.get(cat, 0.0) + rss
                peak_total, peak_parts = total, parts
            peak_machine = max(peak_machine, machine_used_mb() - base_used)
            stop.wait(args.interval)

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    rc = proc.wait()
    stop.set()
    th.join()
    print(f"\n== peak memory of `{' '.join(argv)}` ({time.monotonic() - t0:.0f} s, exit {rc}) ==")
    print(f"processes of this repository, peak RSS sum: {peak_total / 1024:.2f} GiB")
    for cat, mb in sorted(peak_parts.items(), key=lambda kv: -kv[1]):
        print(f"  {cat:<24} {mb:8.0f} MiB")
    total_mb = psutil.virtual_memory().total / 2**20
    print(f"machine memory in use above the start: peak {peak_machine / 1024:.2f} GiB "
          f"(machine: {total_mb / 1024:.1f} GiB)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
