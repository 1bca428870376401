"""Benchmark: fleetctl (and fleetlab) start-up, whole process (target: median <= 0.3 s for the commands that need
no Airflow).

    .venv/bin/python bench/cli_startup.py [--runs 5] [--all]

Runs each command once to warm the caches, then --runs times, and prints the median, min and max
wall time of the whole `.venv/bin/fleetctl ...` (or `fleetlab ...`) process. --all adds a command that imports Airflow
(`fleetctl audit list`, reading an empty data root), for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLEETCTL = REPO / ".venv" / "bin" / "fleetctl"
FLEETLAB = REPO / ".venv" / "bin" / "fleetlab"
TARGET = 0.3

COMMANDS = [
    ["--help"],
    ["offsets", "decode", "--key", "000100016700017400000003",
     "--value", "0001000000000000002a00036d310000000000000003e800000000000007d0"],
    ["offsets", "cleaner-capacity", "--dedupe-buffer-size", "134217728", "--threads", "1"],
    ["coordinator", "partition", "my-group", "polygenelubricants", "--partitions", "50"],
    ["lag", "--help"],
    ["offsets", "dump", "--help"],
]
#: the lab's own command (it imports no Airflow either)
LAB_COMMANDS = [["--help"], ["env"]]


def once(argv: list[str], command: Path = FLEETCTL) -> float:
    t0 = time.perf_counter()
    out = subprocess.run([str(command), *argv], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        sys.exit(f"{command.name} {' '.join(argv)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return wall


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--all", action="store_true", help="also time a command that imports Airflow")
    args = p.parse_args()
    commands = [(FLEETCTL, argv) for argv in COMMANDS] + [(FLEETLAB, argv) for argv in LAB_COMMANDS]
    if args.all:
        commands.append((FLEETCTL, ["audit", "list", "--data-root", tempfile.mkdtemp(prefix="fleetctl-bench-")]))
    print(f"fleetctl start-up, whole process, {args.runs} warm runs each (target: median <= {TARGET} s "
          "without Airflow)")
    over = 0
    for command, argv in commands:
        once(argv, command)  # warm-up
        times = [once(argv, command) for _ in range(args.runs)]
        med = statistics.median(times)
        airflow_free = argv[0] != "audit"
        verdict = ("ok" if med <= TARGET else "OVER") if airflow_free else "(imports Airflow)"
        over += airflow_free and med > TARGET
        label = " ".join(([] if command == FLEETCTL else [command.name])
                         + (argv if len(" ".join(argv)) < 60 else argv[:3] + ["..."]))
        print(f"{label:<64} median {med:6.3f} s  min {min(times):6.3f}  max {max(times):6.3f}  {verdict}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
