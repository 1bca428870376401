"""`make demo` step by step: start the lab and Airflow side by side, let the traffic warm up, run
the DAGs the demo shows, print a progress line (with the elapsed time) for each step and task, and
end with the summary and the time per step.

The stuck verdicts need collections of the same groups spanning at least half the analysis window
(fleetkit.stuck.rules: INSUFFICIENT_DATA otherwise), and a frozen offset is judged once work has
waited at it for two snapshot intervals: three collections or more. The demo makes them with two
fleet_maintenance runs and, between them, `fleetctl collect` every 20 s (the demo's collection
pace): the first collection (a run it triggers, or the scheduled run that is due anyway), and the
final run, triggered when the first run is over and held by Airflow (`run_after`) until a minute
after the first collection; its window is 1.6 x the gap it will have (at least 2m). The
collections go on until the final run starts, so a final run started late by a busy scheduler
still finds its window covered. The first run's only Spark job is the stuck analysis
(no offsets health), so it is over by the time the final run is due. The final run analyses the
offsets health too, after its stuck analysis (the DAG starts the health's Spark jobs once the stuck
analysis is over): the verdicts are printed as soon as its stuck report is written, before the
health and ownership (started once the health is done) finish.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable

#: fleet_maintenance conf of the demo's runs: a short window, collections about a minute apart; the
#: first run only collects and judges (its one Spark job is over before the final run is due), the
#: final one analyses the offsets health too, after its stuck verdicts
WINDOW = "2m"
FIRST_CONF = {"window": WINDOW, "offsets_health": "never"}
FINAL_CONF = {"window": WINDOW, "offsets_health": "always"}
COORDINATOR_CONF = {"cluster": "lab", "settle_seconds": 10}
#: the final collection comes this long after the first one ended (half the window, plus margin)
GAP_SECONDS = 62.0
#: a scheduled run due this soon is waited for (it makes the first collection) rather than having it
#: start between the demo's two runs
WAIT_FOR_SCHEDULED_SECONDS = 65.0
#: consumer groups of fleetlab.traffic that commit as they go: (group, topics)
TRAFFIC_GROUPS = (("billing", ("orders",)), ("fraud-check", ("payments",)),
                  ("ledger", ("orders", "payments")), ("inventory-sync", ("inventory",)),
                  ("reporting", ("audit-log",)))
TERMINAL = ("success", "failed", "skipped", "upstream_failed", "removed")


def parse_time(value: str | None) -> dt.datetime | None:
    """An API timestamp ('2026-01-01T00:00:00.123Z') as an aware datetime, None for None."""
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def fmt_seconds(seconds: float) -> str:
    """'42.0s', '3m05s'."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s"


class Clock:
    """Elapsed time since the demo started; progress lines; the steps and their durations."""

    def __init__(self, started_at: float | None = None, out=None):
        self.t0 = started_at if started_at is not None else time.time()
        self.steps: list[tuple[str, float, str]] = []  # (step, seconds, note)
        self.out = out or sys.stdout
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return time.time() - self.t0

    def say(self, message: str) -> None:
        with self._lock:
            print(f"[{fmt_seconds(self.elapsed()):>6}] {message}", file=self.out, flush=True)

    def record(self, step: str, seconds: float, note: str = "") -> None:
        with self._lock:
            self.steps.append((step, seconds, note))

    @contextmanager
    def step(self, name: str, note: str = ""):
        start = time.time()
        self.say(f"{name} ...")
        yield
        seconds = time.time() - start
        self.record(name, seconds, note)
        self.say(f"{name}: done in {fmt_seconds(seconds)}")

    def table(self) -> list[str]:
        """The time per step, then the total since the start (steps that overlap say so)."""
        width = max([len(s) for s, _, _ in self.steps] + [10])
        lines = [f"  {name:<{width}} {fmt_seconds(sec):>7}{'  ' + note if note else ''}"
                 for name, sec, note in self.steps]
        lines.append(f"  {'total':<{width}} {fmt_seconds(self.elapsed()):>7}")
        return lines


# -- processes -------------------------------------------------------------------------------------
def run_logged(clock: Clock, label: str, argv: list[str], env: dict | None = None) -> None:
    """Run argv, each output line printed as a progress line prefixed with `label`; raise on failure."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    for line in proc.stdout:
        clock.say(f"  {label}: {line.rstrip()}")
    rc = proc.wait()
    if rc != 0:
        raise RuntimeError(f"{label}: `{' '.join(argv)}` exited with {rc}")


def in_parallel(clock: Clock, branches: dict[str, list[tuple[str, Callable[[], None]]]]) -> None:
    """Run each branch (a list of (step, function)) in its own thread, the steps of a branch one
    after the other; every step is timed. Re-raises the first failure once all branches ended."""
    errors: list[BaseException] = []

    def run(steps):
        try:
            for name, fn in steps:
                with clock.step(name, "in parallel"):
                    fn()
        except BaseException as e:  # noqa: BLE001 - reported below, after the other branches
            errors.append(e)

    threads = [threading.Thread(target=run, args=(steps,), name=branch, daemon=True)
               for branch, steps in branches.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# -- traffic ------------------------------------------------------------------------------------
def traffic_ready(bootstrap: str, groups: Iterable[tuple[str, Iterable[str]]] = TRAFFIC_GROUPS,
                  partitions: int = 3, kafka_version: str = "0.9.0.1", security: dict | None = None) -> list[str]:
    """The groups (of `groups`) that have not committed an offset on every partition yet (`security`:
    a secured lab's admin login, LabSpec.security_config("admin"))."""
    from confluent_kafka import TopicPartition

    from fleetlab.traffic import consumer

    missing = []
    for group, topics in groups:
        c = consumer(bootstrap, group, kafka_version, security)
        try:
            got = c.committed([TopicPartition(t, p) for t in topics for p in range(partitions)], timeout=10)
            if any(tp.offset < 0 for tp in got):
                missing.append(group)
        except Exception:  # noqa: BLE001 - a group still being created answers an error: not ready
            missing.append(group)
        finally:
            c.close()
    return missing


def wait_traffic(clock: Clock, specs: Iterable, timeout: float = 90) -> None:
    """Until every traffic group has committed on every cluster (the first collection then sees
    them all)."""
    deadline = time.monotonic() + timeout
    while True:
        missing = [f"{spec.name}/{group}" for spec in specs
                   for group in traffic_ready(spec.bootstrap, kafka_version=spec.kafka_version,
                                               security=spec.security_config("admin"))]
        if not missing:
            return
        if time.monotonic() > deadline:
            clock.say(f"warning: after {timeout:.0f}s these groups have not committed yet: {', '.join(missing)}")
            return
        time.sleep(1)


# -- Airflow runs -----------------------------------------------------------------------------------
class Airflow:
    """The REST calls the demo makes (fleetlab.airflow_services.api)."""

    def __init__(self, api=None):
        if api is None:
            from fleetlab import airflow_services

            api = airflow_services.api
        self.api = api

    def set_paused(self, dag_id: str, paused: bool, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while True:  # the dag-processor may not have parsed the DAG yet
            try:
                return self.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})
            except Exception as e:  # noqa: BLE001
                if time.monotonic() > deadline:
                    raise RuntimeError(f"DAG {dag_id!r} not available in Airflow after {timeout:.0f}s: {e}") from e
                time.sleep(1)

    def dag(self, dag_id: str) -> dict:
        return self.api("GET", f"/api/v2/dags/{dag_id}")

    def trigger(self, dag_id: str, conf: dict, run_after: dt.datetime | None = None) -> dict:
        body: dict = {"logical_date": None, "conf": conf}
        if run_after is not None:
            body["run_after"] = run_after.isoformat()
        return self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)

    def run(self, dag_id: str, run_id: str) -> dict:
        from urllib.parse import quote

        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}")

    def active_runs(self, dag_id: str) -> list[dict]:
        out = []
        for state in ("queued", "running"):
            out += self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?state={state}&order_by=run_after")["dag_runs"]
        return sorted(out, key=lambda r: r["run_after"])

    def tasks(self, dag_id: str, run_id: str) -> list[dict]:
        from urllib.parse import quote

        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances?limit=200"
                        )["task_instances"]

    def log_events(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> list:
        from urllib.parse import quote

        path = (f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/logs/"
                f"{try_number}?map_index={map_index}")
        content = self.api("GET", path).get("content") or []
        return content if isinstance(content, list) else []


def spark_split(events: list) -> tuple[float, float] | None:
    """(spark-submit start-up, the job) in seconds from a Spark task's log events: start-up runs from
    the spark-submit command line to the Spark context's block manager being up (the JVM, the
    driver, the local executor), the job from there to the last event."""
    submit = ready = last = None
    for e in events:
        if not isinstance(e, dict):
            continue
        ts = parse_time(e.get("timestamp"))
        text = str(e.get("event", ""))
        if ts is None:
            continue
        last = ts
        if submit is None and "Spark-Submit cmd" in text:
            submit = ts
        elif submit is not None and ready is None and "Initialized BlockManager" in text:
            ready = ts
    if submit is None or ready is None or last is None:
        return None
    return (ready - submit).total_seconds(), (last - ready).total_seconds()


def describe_task(ti: dict, events: list | None = None) -> str:
    """'analyse_stuck success: queued 0.1s, ran 67.3s (spark-submit start-up 14.3s, job 53.0s)'."""
    name = ti["task_id"] + (f"[{ti.get('rendered_map_index') or ti['map_index']}]" if ti.get("map_index", -1) >= 0
                            else "")
    queued, start, end = parse_time(ti.get("queued_when")), parse_time(ti.get("start_date")), \
        parse_time(ti.get("end_date"))
    if ti["state"] in ("skipped", "upstream_failed", "removed") or start is None:
        return f"{name} {ti['state']}"
    parts = []
    if queued is not None:
        parts.append(f"queued {fmt_seconds(max(0.0, (start - queued).total_seconds()))}")
    if end is not None:
        ran = f"ran {fmt_seconds((end - start).total_seconds())}"
        split = spark_split(events) if events else None
        if split:
            ran += f" (spark-submit start-up {fmt_seconds(split[0])}, job {fmt_seconds(split[1])})"
        elif any(isinstance(e, dict) and "runs in process (no Spark start-up)" in str(e.get("event", ""))
                 for e in events or ()):
            ran += " (small input: judged in process, no Spark start-up)"
        parts.append(ran)
    return f"{name} {ti['state']}: {', '.join(parts)}"


def is_spark_task(ti: dict) -> bool:
    return "Spark" in (ti.get("operator") or "")


class RunWatch:
    """One DAG run followed to its end: a progress line per finished task."""

    def __init__(self, clock: Clock, airflow: Airflow, dag_id: str, run_id: str, label: str):
        self.clock, self.airflow, self.dag_id, self.run_id, self.label = clock, airflow, dag_id, run_id, label
        self.seen: set[tuple[str, int]] = set()
        self.tis: dict[tuple[str, int], dict] = {}
        self.state = "queued"
        self.info: dict = {}
        self.started_said = False
        self.recorded = False
        self.triggered = False  # by the demo (its conf), not by the scheduler
        self.on_start: Callable[[], None] | None = None  # called once, when the run has started

    def poll(self) -> bool:
        """Look once; True when the run is over."""
        self.info = self.airflow.run(self.dag_id, self.run_id)
        self.state = self.info["state"]
        if self.info.get("start_date") and not self.started_said:
            self.started_said = True
            self.clock.say(f"{self.label}: started")
            if self.on_start is not None:
                self.on_start()
        # replaced, not merged: a mapped task is listed once unexpanded (map index -1), then per index
        self.tis = {(ti["task_id"], ti.get("map_index", -1)): ti for ti in self.airflow.tasks(self.dag_id, self.run_id)}
        for key, ti in self.tis.items():
            if key in self.seen or ti["state"] not in TERMINAL:
                continue
            self.seen.add(key)
            events = None
            if is_spark_task(ti) and ti["state"] == "success":
                try:
                    events = self.airflow.log_events(self.dag_id, self.run_id, ti["task_id"], ti["try_number"],
                                                     ti.get("map_index", -1))
                except Exception:  # noqa: BLE001 - the timing split is a nicety
                    events = None
            self.clock.say(f"  {self.label}: {describe_task(ti, events)}")
        return self.state in ("success", "failed")

    def task(self, task_id: str) -> dict | None:
        return self.tis.get((task_id, -1)) or next((t for (tid, _), t in self.tis.items() if tid == task_id), None)

    def times(self) -> tuple[float, float]:
        """(queued, running) seconds of the run."""
        q, s, e = (parse_time(self.info.get(k)) for k in ("queued_at", "start_date", "end_date"))
        queued = (s - q).total_seconds() if s and q else 0.0
        running = (e - s).total_seconds() if e and s else 0.0
        return max(0.0, queued), running

    def record(self) -> None:
        if self.recorded:
            return
        self.recorded = True
        queued, running = self.times()
        self.clock.record(self.label, queued + running,
                          f"{self.state}: waited {fmt_seconds(queued)} to start, ran {fmt_seconds(running)}")
        self.clock.say(f"{self.label}: {self.state} (waited {fmt_seconds(queued)} to start, ran "
                       f"{fmt_seconds(running)})")


def watch(watches: list[RunWatch], timeout: float, until: Callable[[], bool] | None = None,
          interval: float = 2.0) -> None:
    """Poll the runs until all are over (or `until()` says so); each finished run is recorded."""
    deadline = time.monotonic() + timeout
    done: set[int] = {i for i, w in enumerate(watches) if w.recorded}
    while True:
        for i, w in enumerate(watches):
            if i not in done and w.poll():
                done.add(i)
                w.record()
        if len(done) == len(watches) or (until is not None and until()):
            return
        if time.monotonic() > deadline:
            left = ", ".join(f"{w.label} ({w.state})" for i, w in enumerate(watches) if i not in done)
            raise RuntimeError(f"still not finished after {timeout:.0f}s: {left}")
        time.sleep(interval)


def first_run_choice(now: dt.datetime, next_run_after: dt.datetime | None, active: list[dict]) -> tuple[str, float]:
    """How the demo gets its first collection: ("use", 0) a run already queued or running (the
    scheduler starts a due run as soon as the DAG is unpaused); ("wait", seconds) for the scheduled
    run due within WAIT_FOR_SCHEDULED_SECONDS (triggered instead, it would start between the demo's
    two runs); ("trigger", 0) otherwise."""
    if active:
        return "use", 0.0
    if next_run_after is not None:
        due_in = (next_run_after - now).total_seconds()
        if due_in < WAIT_FOR_SCHEDULED_SECONDS:
            return "wait", max(0.0, due_in)
    return "trigger", 0.0


def left_over(runs: list[dict], started: dt.datetime) -> list[dict]:
    """The queued or running runs due before this demo started: left by an earlier demo that was
    stopped mid-run (their tasks' processes are gone; their collections are old)."""
    return [r for r in runs if (parse_time(r.get("run_after")) or started) < started - dt.timedelta(minutes=1)]


def mark_failed(clock: Clock, airflow: Airflow, dag_id: str, run_id: str, tries: int = 3) -> bool:
    """Mark a run an earlier demo left running as failed. The api-server may refuse while the
    scheduler updates the same run (a 500 on its UPDATE): tried again, then only said."""
    from urllib.parse import quote

    for attempt in range(tries):
        try:
            airflow.api("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}", {"state": "failed"})
            clock.say(f"{dag_id} run {run_id} was left running by an earlier demo: marked failed")
            return True
        except Exception as e:  # noqa: BLE001 - the demo goes on without that run either way
            if attempt == tries - 1:
                clock.say(f"warning: {dag_id} run {run_id}, left running by an earlier demo, could not be marked "
                          f"failed ({e}); the demo does not use it")
                return False
            time.sleep(2)
    return False  # tries == 0


def first_collection(clock: Clock, airflow: Airflow, dag_id: str = "fleet_maintenance") -> RunWatch:
    """The run that makes the first collection (first_run_choice); a run an earlier demo left
    running is marked failed first, never used."""
    started = dt.datetime.fromtimestamp(clock.t0, dt.timezone.utc)
    stale = {r["dag_run_id"] for r in left_over(airflow.active_runs(dag_id), started)}
    for run_id in sorted(stale):
        mark_failed(clock, airflow, dag_id, run_id)

    def active() -> list[dict]:  # never a run an earlier demo left, marked failed or not
        return [r for r in airflow.active_runs(dag_id) if r["dag_run_id"] not in stale]

    due = parse_time(airflow.dag(dag_id).get("next_dagrun_run_after"))
    choice, wait = first_run_choice(dt.datetime.now(dt.timezone.utc), due, active())
    if choice == "wait":
        clock.say(f"the scheduled {dag_id} run of {due:%H:%M} UTC is due"
                  + (f" in {wait:.0f}s" if wait >= 1 else "") + ": it makes the first collection")
        deadline = time.monotonic() + wait + 30
        while time.monotonic() < deadline and not active():
            time.sleep(1)
    runs = active()
    if runs:
        label = f"{dag_id} run 1 ({runs[0].get('run_type') or 'scheduled'})"
        clock.say(f"{label}: {runs[0]['dag_run_id']} makes the first collection")
        return RunWatch(clock, airflow, dag_id, runs[0]["dag_run_id"], label)
    if choice == "wait":
        clock.say("the scheduler did not start the scheduled run: triggering one")
    run = airflow.trigger(dag_id, FIRST_CONF)
    clock.say(f"triggered {dag_id} run {run['dag_run_id']} (conf {json.dumps(FIRST_CONF)})")
    w = RunWatch(clock, airflow, dag_id, run["dag_run_id"], f"{dag_id} run 1")
    w.triggered = True
    return w


def final_window(gap_seconds: float, minimum: float = 120.0) -> int:
    """The analysis window (seconds) of the final run when its collection comes about `gap_seconds`
    after the first one: the rules judge a partition only when its snapshots span at least half the
    window, and the first snapshot must still be inside it, so the window lies between the gap and
    twice the gap. The final run is held until its time (run_after), so it comes late rather than
    early: a run of the schedule still going, a busy scheduler. 1.6 x the gap keeps both
    collections judged from 15% early to 60% late."""
    return int(max(minimum, -(-1.6 * gap_seconds // 1)))


#: seconds from a run's start to its collection (list_clusters, then collect), assumed when the
#: final run's window is chosen
COLLECT_DELAY = 15.0


#: the demo's collection pace between its runs
COLLECT_EVERY = 20.0


def collections_until(clock: Clock, done: Callable[[], bool], every: float = COLLECT_EVERY) -> int:
    """`fleetctl collect --cluster all` (into the data root the DAG runs use) every `every` seconds
    until `done()`: the demo collects at its own pace between the first collection and the final
    run, so that whenever the final run starts (a busy scheduler starts it late), its window holds
    collections spanning it. Returns how many were made."""
    n = 0
    nxt = time.monotonic() + every
    while not done():
        if time.monotonic() < nxt:
            time.sleep(0.5)
            continue
        nxt = time.monotonic() + every
        t0 = time.monotonic()
        out = subprocess.run([fleetctl(), "collect", "--cluster", "all"], capture_output=True, text=True)
        if out.returncode != 0:
            clock.say(f"warning: a collection between the runs failed ({out.returncode}): {out.stderr.strip()[-500:]}")
        else:
            n += 1
            clock.say(f"collection {n} between the runs (fleetctl collect --cluster all): {time.monotonic() - t0:.1f}s")
    return n


def run_dags(clock: Clock, airflow: Airflow, timeout: float = 900, coordinator_cluster: str = "lab") -> dict:
    """The demo's DAG runs; returns the run ids the summary shows. The coordinator check runs on
    `coordinator_cluster` (the 0.9 cluster of the lab fleet; the hosts profile's one cluster)."""
    # ownership is unpaused when the demo starts its run: its leader-change watch would
    # otherwise start a run (a Spark job) on the lab's start-up leader elections, beside the runs
    # the verdicts wait for
    airflow.set_paused("ownership", True)  # unpaused by an earlier demo
    airflow.set_paused("fleet_maintenance", False)
    first = first_collection(clock, airflow)

    # the final run comes when run 1 is over (one fleet_maintenance run at a time) and at least a
    # minute after the first collection (Airflow holds it until then: run_after); its window is
    # chosen from the gap it will actually have, so a slow run 1 does not leave it one snapshot
    watch([first], timeout, until=lambda: (first.task("collect") or {}).get("state") in TERMINAL)
    collected = parse_time((first.task("collect") or {}).get("end_date")) or dt.datetime.now(dt.timezone.utc)
    # collections at the demo's pace from the first one until the final run starts: a frozen offset
    # is judged once it has waited two snapshot intervals (rules.frozen_all_window), and a final run
    # started late (a slow run 1, a busy scheduler) still finds its window covered
    final_started = threading.Event()
    between = threading.Thread(target=collections_until, args=(clock, final_started.is_set),
                               name="demo-collections", daemon=True)
    between.start()
    watch([first], timeout)
    now = dt.datetime.now(dt.timezone.utc)
    run_after = max(now, collected + dt.timedelta(seconds=GAP_SECONDS))
    gap = (run_after - collected).total_seconds() + COLLECT_DELAY
    final_conf = dict(FINAL_CONF, window=f"{final_window(gap)}s")
    final_run = airflow.trigger("fleet_maintenance", final_conf, run_after=run_after)
    clock.say(f"triggered fleet_maintenance run {final_run['dag_run_id']} (conf {json.dumps(final_conf)}): it starts "
              f"at {run_after:%H:%M:%S} UTC, about {gap:.0f}s after the first collection")
    final = RunWatch(clock, airflow, "fleet_maintenance", final_run["dag_run_id"], "fleet_maintenance run 2 (final)")
    final.on_start = final_started.set

    # the verdicts as soon as the final run's stuck report is written; ownership reads
    # the newest offsets health, so it starts when the final run's health is done
    def stuck_reported() -> bool:
        return (final.task("report_stuck") or {}).get("state") in TERMINAL or final.recorded

    watch([first, final], timeout, until=stuck_reported)
    first_verdicts(clock, final)

    def health_done() -> bool:
        return (final.task("trim_health") or {}).get("state") in TERMINAL or final.recorded

    watch([first, final], timeout, until=health_done)
    airflow.set_paused("ownership", False)
    coord_conf = dict(COORDINATOR_CONF, cluster=coordinator_cluster)
    coord_run = airflow.trigger("ownership", coord_conf)
    clock.say(f"triggered ownership run {coord_run['dag_run_id']} (conf {json.dumps(coord_conf)})")
    coord = RunWatch(clock, airflow, "ownership", coord_run["dag_run_id"], "ownership run")
    watch([first, final, coord], timeout)
    final_started.set()
    between.join(timeout=60)
    failed = [w.label for w in (first, final, coord) if w.state != "success"]
    if failed:
        clock.say(f"warning: not successful: {', '.join(failed)} (see the task logs in the Airflow UI)")
    return {"first": first.run_id, "final": final.run_id, "coordinator": coord.run_id, "failed": failed,
            "window": final_conf["window"]}


def first_verdicts(clock: Clock, final: RunWatch) -> None:
    """The final run's flagged partitions, printed once its stuck report is written (the health
    and the coordinator check still run): the time to the first verdicts is the demo's headline."""
    if (final.task("report_stuck") or {}).get("state") != "success":
        clock.say(f"{final.label}: no stuck report (report_stuck {(final.task('report_stuck') or {}).get('state')})")
        return
    from fleetkit.core.datasets import DataRoot
    from fleet_airflow import settings
    from fleetlab.demo_summary import flagged_lines, stuck_run_dir

    clock.record("first verdicts", clock.elapsed(), "from the start of make demo to the final run's stuck report")
    run_dir = stuck_run_dir(DataRoot(settings.data_root()), final.run_id)
    lines = flagged_lines(run_dir) if run_dir is not None else []
    clock.say(f"first verdicts ({final.label}): {len(lines)} flagged partition(s)"
              + (f", report {run_dir / 'report.html'}" if run_dir is not None else ""))
    for line in lines:
        print(line, flush=True)


# -- the whole demo ------------------------------------------------------------------------------
def fleetctl() -> str:
    return str(Path(sys.executable).parent / "fleetctl")


def fleetlab() -> str:
    return str(Path(sys.executable).parent / "fleetlab")


def airflow_up(clock: Clock) -> None:
    """`fleetlab airflow up` in this process (no Airflow import needed: its processes are started)."""
    from fleetlab import airflow_services as services

    services.up(progress=lambda line: clock.say(f"  airflow: {line}"))
    clock.say(f"  airflow: UI {services.api_url()}")


def main(started_at: float | None = None, setup_seconds: float | None = None) -> int:
    clock = Clock(started_at)
    if setup_seconds is not None:
        clock.record("setup check", setup_seconds)
    from fleetlab.paths import load_airflow_env

    load_airflow_env()  # the lab's deployment (its fleet file, data root, connections) for fleetctl and the summary
    env = dict(os.environ)
    lab_cmd = fleetlab()

    from fleetlab import airflow_services as services
    from fleetlab.lab import Lab, fleet_specs

    if services.profile() == "hosts":
        # the hosts profile starts its own cluster on the broker hosts with Airflow (its workers
        # reach no other): Airflow first, then the traffic on that cluster
        with clock.step("lab hosts, Kafka on the broker hosts and Airflow up"):
            airflow_up(clock)
        specs = services.lab_specs()
        with clock.step("traffic warm-up (groups committed)"):
            for spec in specs:
                Lab(spec).start_traffic()
            wait_traffic(clock, specs)
    else:
        specs = list(fleet_specs().values())

        def traffic() -> None:
            run_logged(clock, "traffic", [lab_cmd, "traffic", "start"], env)
            wait_traffic(clock, specs)

        # the lab and Airflow do not need each other to start: the DAGs reach the clusters only when
        # they run, and the leader-change watch retries until ZooKeeper answers
        in_parallel(clock, {
            "lab": [("lab up", lambda: run_logged(clock, "lab", [lab_cmd, "up"], env)),
                    ("traffic warm-up (groups committed)", traffic)],
            "airflow": [("Airflow up", lambda: airflow_up(clock))],
        })
    with clock.step("DAG runs"):
        runs = run_dags(clock, Airflow(), coordinator_cluster="lab" if len(specs) > 1 else specs[0].name)
    with clock.step("summary"):
        from fleetlab import demo_summary

        demo_summary.main(stuck_run=runs["final"], runs=runs)
    print("time per step (lab up + traffic warm-up ran in parallel with Airflow up; the DAG runs "
          "overlap where Airflow runs them side by side):")
    for line in clock.table():
        print(line)
    return 1 if runs["failed"] else 0
