"""Shared by the benchmarks: run a command, time it, sample the peak RSS of its process tree."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def spark_env() -> dict:
    return dict(os.environ, PATH=f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}", SPARK_LOCAL_IP="127.0.0.1")


def run_measured(argv: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS of the whole process tree in GiB, stdout). Exits on failure."""
    peak = 0
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or spark_env())
    stop = threading.Event()

    def sample():
        nonlocal peak
        root = psutil.Process(proc.pid)
        while not stop.is_set():
            try:
                peak = max(peak, sum(p.memory_info().rss for p in [root] + root.children(recursive=True)))
            except psutil.Error:
                pass
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    wall = time.monotonic() - t0
    stop.set()
    th.join()
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed:\n{err[-4000:]}")
    return wall, peak / 2**30, out
