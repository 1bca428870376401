"""Shared by the benchmarks: run a command, time it, sample the peak RSS of its process tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def spark_env(repo: Path = REPO) -> dict:
    """The environment of a spark-submit of `repo`'s jobs: another checkout's jobs import its own
    library first (this checkout's virtualenv holds this one as an editable install)."""
    env = dict(os.environ, PATH=f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}", SPARK_LOCAL_IP="127.0.0.1")
    if Path(repo).resolve() != REPO.resolve():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(repo) / "include"), env.get("PYTHONPATH")) if p)
    return env


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


# -- where a Spark job's time goes: from the job's own event log --------------------------------

_PYTHON_METRICS = ("time to start Python workers", "time to initialize Python workers", "time to execute Python code")


def spark_submit_profiled(argv: list[str], master: str = "local[2]", driver_memory: str = "4g",
                          conf: dict | None = None, repo: Path = REPO) -> tuple[float, float, str, dict]:
    """spark-submit ARGV (a job of checkout `repo`) with an event log; (wall s, peak GiB, stdout,
    breakdown), where breakdown says where the wall time went (see `breakdown`)."""
    logs = Path(tempfile.mkdtemp(prefix="spark-events-"))
    confs = {"spark.ui.enabled": "false", "spark.eventLog.enabled": "true", "spark.eventLog.dir": logs.as_uri(),
             "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false", **(conf or {})}
    cmd = ["spark-submit", "--master", master, "--driver-memory", driver_memory]
    for k, v in confs.items():
        cmd += ["--conf", f"{k}={v}"]
    t0 = time.time()
    wall, peak, out = run_measured(cmd + argv, spark_env(repo))
    files = sorted(p for p in logs.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus")))
    b = breakdown(files[-1], t0, wall) if files else {}
    if os.environ.get("FLEET_BENCH_KEEP_EVENTS"):
        print(f"  event log kept: {files[-1] if files else logs}", flush=True)
    else:
        shutil.rmtree(logs, ignore_errors=True)
    return wall, peak, out, b


def breakdown(event_log: Path, launched_at: float, wall: float) -> dict:
    """Seconds of wall time: `spark_start` (launch to the first job), `jobs` (sum of job spans),
    `driver` (the rest: planning, collecting results, writing files on the driver, stopping);
    and of task time summed over both cores: `task` (all), `read` (Parquet/JSON scans), `shuffle`
    (writing and waiting for shuffle blocks), `python_udf` (Python workers: start, init, execute;
    a worker that waits for its input rows counts the wait too),
    `aggregate` (hash aggregation build), `sort`, `gc` -- Spark's own metrics, which nest (an
    aggregation's build time includes the scan feeding it), so they overlap; `other_task` = task
    minus all of them, floored at 0; `stages`: the three longest stages (seconds, what they do)."""
    first_job = None
    jobs: dict[int, list[float]] = {}
    task = read = shuffle = python = gc = agg = sort = 0.0
    stages = []
    with event_log.open() as f:
        for line in f:
            ev = json.loads(line)
            kind = ev.get("Event")
            if kind == "SparkListenerJobStart":
                jobs[ev["Job ID"]] = [ev["Submission Time"] / 1000, 0]
                first_job = first_job or ev["Submission Time"] / 1000
            elif kind == "SparkListenerJobEnd" and ev["Job ID"] in jobs:
                jobs[ev["Job ID"]][1] = ev["Completion Time"] / 1000
            elif kind == "SparkListenerStageCompleted":
                si = ev["Stage Info"]
                if si.get("Completion Time") and si.get("Submission Time"):
                    names = " ".join(r.get("Name", "") for r in si.get("RDD Info", []))
                    kinds = [k for k, hit in (("scan", "FileScanRDD" in names), ("shuffle read", "ShuffledRowRDD" in names),
                                              ("python", "Python" in names)) if hit]
                    stages.append(((si["Completion Time"] - si["Submission Time"]) / 1000,
                                   f"{'+'.join(kinds) or 'local'} ({si['Number of Tasks']} tasks)"))
            elif kind == "SparkListenerTaskEnd":
                m = ev.get("Task Metrics") or {}
                task += m.get("Executor Run Time", 0) / 1000
                gc += m.get("JVM GC Time", 0) / 1000
                shuffle += (m.get("Shuffle Write Metrics", {}).get("Shuffle Write Time", 0) / 1e9
                            + m.get("Shuffle Read Metrics", {}).get("Fetch Wait Time", 0) / 1000)
                for acc in (ev.get("Task Info") or {}).get("Accumulables", []):
                    name, upd = acc.get("Name", ""), acc.get("Update")
                    if not isinstance(upd, (int, float, str)) or not str(upd).lstrip("-").isdigit():
                        continue
                    if name == "scan time":
                        read += int(upd) / 1000
                    elif name in _PYTHON_METRICS:
                        python += int(upd) / 1000
                    elif name == "time in aggregation build":
                        agg += int(upd) / 1000
                    elif name == "sort time":
                        sort += int(upd) / 1000
    spans = sorted(s for s in jobs.values() if s[1])
    busy, end = 0.0, 0.0  # union of job spans (jobs may overlap)
    for s, e in spans:
        busy += max(0.0, e - max(s, end))
        end = max(end, e)
    start = (first_job - launched_at) if first_job else wall
    return {"wall": wall, "spark_start": start, "jobs": busy, "driver": max(0.0, wall - start - busy),
            "task": task, "read": read, "shuffle": shuffle, "python_udf": python, "aggregate": agg, "sort": sort,
            "gc": gc, "other_task": max(0.0, task - read - shuffle - python - agg - sort - gc),
            "stages": sorted(stages, reverse=True)[:3]}


def format_breakdown(b: dict) -> str:
    if not b:
        return "(no event log)"
    return (f"wall {b['wall']:.1f}s = Spark start {b['spark_start']:.1f}s + jobs {b['jobs']:.1f}s + driver "
            f"{b['driver']:.1f}s | task time {b['task']:.1f}s over the cores, of which (Spark's metrics; an "
            f"operator's time includes the operators feeding it, so they overlap): read {b['read']:.1f}s, shuffle "
            f"{b['shuffle']:.1f}s, Python UDF {b['python_udf']:.1f}s, hash aggregation {b['aggregate']:.1f}s, sort "
            f"{b['sort']:.1f}s, GC {b['gc']:.1f}s | longest stages: "
            + ", ".join(f"{s:.1f}s {n}" for s, n in b["stages"]))


def timed(fn) -> tuple[float, object]:
    """(seconds, result) of one call of `fn`."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def synthetic_fleet(clusters: list[str]):
    """A parsed fleet file of `clusters` (Kafka 3.9.2, one approver) for benchmarks over generated data."""
    from fleetkit.core.fleet import parse_fleet

    return parse_fleet("version: 1\nclusters:\n" + "".join(
        f"  - {{name: {c}, kafka_version: '3.9.2', kafka_conn_id: {c.replace('-', '_')}_kafka, approvers: [a]}}\n"
        for c in clusters), path="bench")
