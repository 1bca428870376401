"""Benchmark: the toolkit's incident path beside LinkedIn Burrow, on the same live Kafka 0.9 lab.

    FLEET_TEST_PORT_OFFSET=3000 .venv/bin/python bench/incident_cycle.py [--interval 10] [--fault-after 100]
        [--after-fault 110] [--window 15m] [--burrow PATH] [--keep]

Starts the benchmark's own 0.9 lab (bench/collect_offsets.py's `bench_lab`: the `bench` slot of the
tests' port plan, PLAINTEXT) and runs bench/stuck_latency.py's scenarios (healthy, stalled, stopped,
rewound, slow, rare, slow-committer: one group per topic, the same producer, the fault after
--fault-after seconds). Every --interval seconds it runs, as an operator would, the real CLI as
subprocesses: `fleetctl collect --cluster bench-lab`, then `fleetctl stuck --cluster bench-lab --json`
(the verdicts), then `fleetctl lag GROUP... --cluster bench-lab` (timed only), and records each
command's wall time and exit code and the first time each group gets each verdict (when `stuck`
returned), relative to the fault.

Beside it, Burrow (the binary given by --burrow; else one built by `go install` into
<cache>/burrow (GOBIN), tried while none is there; else `Burrow` on PATH, Debian's package
`burrow`) watches the same cluster: its kafka cluster and consumer modules (kafka-version 0.9.0.1, __consumer_offsets),
the lab's ZooKeeper, an HTTP server on 127.0.0.1, storage and evaluator defaults. Its
`/v3/kafka/bench/consumer/<group>/status` is polled every second for each group; the first time
each status (the group's OK/WARN/ERR, the partition's WARN/STOP/STALL/REWIND) appears is recorded.
When Burrow cannot be had or never sees the groups, the script says so in red, prints the toolkit's
figures anyway and exits 1.

Prints, per scenario, each tool's first verdicts after the fault and its false positives (an alarm
on healthy, slow, rare or slow-committer at any time, or on a faulty consumer before the fault;
toolkit alarms: STALLED, STOPPED, FROZEN, REWOUND, OUT_OF_RANGE; Burrow's: ERR, STOP, STALL,
REWIND), the median and max wall time of the three commands, and the
targets: collect, stuck and lag <= 1 s each (median); STALLED / STOPPED <= 15 s after the fault;
zero false positives. Exit 0 when it ran, whatever the figures.
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
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "include"), str(REPO / "plugins"), str(REPO)]

from collect_offsets import bench_lab  # noqa: E402
from stuck_latency import ALARMS, EXPECTED, PREFIX, SCENARIOS, Traffic  # noqa: E402

from fleetctl.output import print_table, red  # noqa: E402
from fleetlab import dists, ports, procs  # noqa: E402

FLEETCTL = str(REPO / ".venv" / "bin" / "fleetctl")
CLI_TARGET = 1.0       # s, median of collect, stuck and lag
DETECT_TARGET = 15.0   # s from the fault to STALLED / STOPPED, end to end
TOOLKIT_EXPECTED = {**EXPECTED, "slow": "LAGGING"}
#: Burrow's partition status for each fault (a STOP, STALL or REWIND partition makes the group ERR)
BURROW_EXPECTED = {"stalled": "STALL", "stopped": "STOP", "rewound": "REWIND", "slow": "WARN"}
BURROW_ALARMS = ("ERR", "STOP", "STALL", "REWIND")
BURROW_CLUSTER = "bench"
BURROW_MODULE = "github.com/linkedin/Burrow"


class Firsts:
    """The first time each (scenario, status) is seen, before and after the fault, by one tool."""

    def __init__(self):
        self.fault: float | None = None
        self.at: dict[tuple[str, str, bool], float] = {}
        self.lock = threading.Lock()

    def see(self, scenario: str, status: str, when: float) -> bool:
        """Record a status; True when it is new (for this scenario, on this side of the fault)."""
        key = (scenario, status, self.fault is not None and when >= self.fault)
        with self.lock:
            return self.at.setdefault(key, when) == when

    def after(self, scenario: str) -> dict[str, float]:
        """{status: seconds after the fault} of the statuses first seen after it."""
        return {s: t - self.fault for (n, s, after), t in self.at.items() if n == scenario and after}

    def before(self, scenario: str) -> dict[str, float]:
        return {s: t - (self.fault or t) for (n, s, after), t in self.at.items() if n == scenario and not after}

    def false_positives(self, scenario: str, alarms) -> list[str]:
        """Alarms on a scenario without a fault (at any time) or on a faulty one before its fault."""
        seen = self.before(scenario) if scenario in EXPECTED else {**self.before(scenario), **self.after(scenario)}
        return [f"{s}@{r:+.0f}s" for s, r in sorted(seen.items(), key=lambda kv: kv[1]) if s in alarms]


# -- Burrow ------------------------------------------------------------------------------------
def burrow_binary(explicit: str | None) -> tuple[str | None, str]:
    """(the Burrow binary, how it was found) or (None, why there is none)."""
    if explicit:
        if not os.access(explicit, os.X_OK):
            return None, f"--burrow {explicit}: not executable"
        return explicit, "--burrow"
    gobin = dists.cache_dir() / "burrow"
    built = gobin / "Burrow"
    why = ""
    if not built.exists():
        go = shutil.which("go") or "/usr/local/go/bin/go"
        if os.access(go, os.X_OK):
            print(f"building Burrow: go install {BURROW_MODULE}@latest (GOBIN={gobin}) ...", flush=True)
            p = subprocess.run([go, "install", f"{BURROW_MODULE}@latest"], capture_output=True, text=True,
                               env=dict(os.environ, GOBIN=str(gobin)), timeout=900)
            if p.returncode:
                why = f"go install {BURROW_MODULE}@latest failed: " + (p.stderr.strip().splitlines() or ["?"])[-1]
                print(why, flush=True)
        else:
            why = "no Go toolchain to build Burrow"
    if built.exists():
        return str(built), f"built in {gobin}"
    on_path = shutil.which("Burrow") or shutil.which("burrow")
    if on_path:
        return on_path, "on PATH"
    return None, why + "; no `Burrow` on PATH either (Debian: apt-get install burrow)"


def burrow_version(binary: str) -> str:
    """The module version (go version -m) or the Debian package version."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    try:
        p = subprocess.run([go, "version", "-m", binary], capture_output=True, text=True, timeout=30)
        for line in p.stdout.splitlines():
            cells = line.split()
            if cells[:2] == ["mod", BURROW_MODULE] and len(cells) > 2 and cells[2] != "(devel)":
                return cells[2]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        owner = subprocess.run(["dpkg-query", "-S", os.path.realpath(binary)], capture_output=True, text=True)
        package = owner.stdout.split(":")[0].strip()
        if owner.returncode == 0 and package:
            v = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
            return f"{v.stdout.strip()} (Debian package {package})"
    except OSError:
        pass
    return "unknown version"


class Burrow:
    """Burrow on the lab: its config folder, process (started in its own session, stopped by PID)
    and the poller of its status API."""

    def __init__(self, binary: str, lab, version: str, folder: Path):
        self.binary, self.folder = binary, folder
        self.port = ports.tests().broker_base(ports.SINGLE_PURPOSE["bench"]) + 80
        self.pid_file, self.log = folder / "process.pid", folder / "burrow.log"
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
        self.stop_polling = threading.Event()
        self.seen_groups: set[str] = set()
        self.errors = 0
        servers = ", ".join(f'"{s}"' for s in lab.spec.bootstrap.split(","))
        whitelist = f"^{PREFIX}.*$"
        (folder / "burrow.toml").write_text(f"""\
[general]
pidfile = "{folder / 'burrow.pid'}"

[logging]
level = "info"

[zookeeper]
servers = ["{lab.spec.zk_hosts}"]
root-path = "/burrow"

[client-profile.bench]
client-id = "burrow-bench"
kafka-version = "{version}"

[cluster.{BURROW_CLUSTER}]
class-name = "kafka"
servers = [{servers}]
client-profile = "bench"

[consumer.{BURROW_CLUSTER}]
class-name = "kafka"
cluster = "{BURROW_CLUSTER}"
servers = [{servers}]
client-profile = "bench"
group-whitelist = "{whitelist}"

[httpserver.default]
address = "127.0.0.1:{self.port}"

[storage.default]
class-name = "inmemory"

[evaluator.default]
class-name = "caching"
""")

    def start(self) -> None:
        if procs.port_open("127.0.0.1", self.port):
            raise RuntimeError(f"127.0.0.1:{self.port} is taken: Burrow's port (another run?)")
        procs.start([self.binary, "--config-dir", str(self.folder)], self.pid_file, self.log, cwd=str(self.folder))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if procs.owned_pid(self.pid_file, str(self.folder)) is None:
                raise RuntimeError("Burrow exited at start: " + self.log_tail())
            try:
                if BURROW_CLUSTER in self.get("/v3/kafka").get("clusters", []):
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"Burrow's HTTP server on 127.0.0.1:{self.port} did not list cluster "
                           f"{BURROW_CLUSTER!r} within 30s: " + self.log_tail())

    def get(self, path: str) -> dict:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with self.opener.open(url, timeout=2) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:  # 404 (group not found yet) carries a JSON body too
            return json.loads(e.read() or b"{}")

    def poll(self, firsts: Firsts) -> None:
        """Every second, each scenario's group status: the group's and its partitions' statuses."""
        while not self.stop_polling.is_set():
            for name in SCENARIOS:
                try:
                    doc = self.get(f"/v3/kafka/{BURROW_CLUSTER}/consumer/{PREFIX}{name}/status")
                except (OSError, ValueError):
                    self.errors += 1
                    continue
                status, now = doc.get("status") or {}, time.time()
                new = False
                if status.get("status") and status["status"] != "NOTFOUND":
                    self.seen_groups.add(name)
                    new = firsts.see(name, status["status"], now)
                for p in status.get("partitions") or []:
                    if p.get("partition") == 0:  # the scenario's partition (1 and 2 stay empty)
                        new |= firsts.see(name, p.get("status", "?"), now)
                if new:  # Burrow's answer when a status first appears, to read afterwards
                    with open(self.folder / "first-statuses.jsonl", "a") as out:
                        out.write(json.dumps({"at": now, "fault": firsts.fault, "status": status}) + "\n")
            self.stop_polling.wait(1.0)

    def log_tail(self, lines: int = 5) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> str:
        self.stop_polling.set()
        return procs.stop(self.pid_file, str(self.folder), timeout=15)


# -- the toolkit's cycle -----------------------------------------------------------------------
def run_cli(argv: list[str], env: dict) -> tuple[float, int, str, str]:
    """(wall seconds, exit code, stdout, stderr) of one whole fleetctl process."""
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    return time.perf_counter() - t, p.returncode, p.stdout, p.stderr


def cycle(args, cluster: str, env: dict, firsts: Firsts, times: dict[str, list], codes: dict[str, list]) -> str:
    """One incident cycle: collect, stuck --json (verdicts recorded), lag (timed). Returns a progress line."""
    groups = [PREFIX + n for n in SCENARIOS]
    window = ["--window", args.window]
    argvs = {"collect": [FLEETCTL, "collect", "--cluster", cluster],
             "stuck": [FLEETCTL, "stuck", "--cluster", cluster, "--json", *window],
             "lag": [FLEETCTL, "lag", *groups, "--cluster", cluster, *window]}
    parts, flagged = [], []
    for what, argv in argvs.items():
        took, code, out, err = run_cli(argv, env)
        times[what].append(took)
        codes[what].append(code)
        parts.append(f"{what} {took:.1f}s ({code})")
        if what == "stuck" and code in (0, 3, 5):  # 5: nothing flagged, some not judged yet
            now = time.time()
            for f in json.loads(out)["flagged"]:
                if f["group"].startswith(PREFIX) and f["partition"] == 0:
                    name = f["group"].removeprefix(PREFIX)
                    firsts.see(name, f["verdict"], now)
                    flagged.append(f"{name} {f['verdict']}")
        elif code not in (0, 3, 5):
            parts[-1] += " " + (err.strip().splitlines() or ["?"])[-1][:160]
    return ", ".join(parts) + (f"; flagged: {', '.join(flagged)}" if flagged else "")


def run(args, lab, version: str, env: dict, firsts: dict[str, Firsts], burrow: Burrow | None,
        times: dict[str, list], codes: dict[str, list]) -> None:
    traffic = Traffic(lab.spec.bootstrap, version)
    poller = None
    try:
        traffic.start()
        if burrow:
            poller = threading.Thread(target=burrow.poll, args=(firsts["burrow"],), daemon=True)
            poller.start()
        start, tick, total = time.monotonic(), 0, args.fault_after + args.after_fault
        while True:
            time.sleep(max(0.0, start + tick * args.interval - time.monotonic()))
            elapsed = time.monotonic() - start
            if elapsed >= args.fault_after and firsts["toolkit"].fault is None:
                at = traffic.fault()
                for f in firsts.values():
                    f.fault = at
                print(f"t={elapsed:5.1f}s  FAULT: stalled meets a poison record, stopped closes, rewound seeks "
                      "300 back", flush=True)
            if elapsed > total:
                break
            times["cycle starts"].append(elapsed)
            print(f"t={elapsed:5.1f}s  {cycle(args, lab.spec.name, env, firsts['toolkit'], times, codes)}", flush=True)
            tick += 1
    finally:
        if burrow:
            burrow.stop_polling.set()
        if poller:
            poller.join(10)
        traffic.stop()


# -- the report --------------------------------------------------------------------------------
def first_text(seen: dict[str, float]) -> str:
    """'ERR +44, STALL +44' (Burrow's OK and NOTFOUND left out: the toolkit's stuck lists only what it flags)."""
    seen = {s: r for s, r in seen.items() if s not in ("OK", "NOTFOUND")}
    return ", ".join(f"{s} {r:+.0f}" for s, r in sorted(seen.items(), key=lambda kv: kv[1])) or "-"


def report(args, firsts: dict[str, Firsts], burrow_name: str, burrow_ok: bool, times, codes, load) -> None:
    tk, bw = firsts["toolkit"], firsts["burrow"]
    print(f"\nBurrow: {burrow_name}" + ("" if burrow_ok else " (no figures)"))
    print("\nfirst verdicts after the fault (s); false positives: an alarm on a consumer without a fault, or "
          "before the fault")
    rows, fp = [], {"toolkit": [], "burrow": []}
    for name in SCENARIOS:
        tk_fp, bw_fp = tk.false_positives(name, ALARMS), bw.false_positives(name, BURROW_ALARMS)
        fp["toolkit"] += [f"{name} {x}" for x in tk_fp]
        fp["burrow"] += [f"{name} {x}" for x in bw_fp]
        rows.append([name, first_text(tk.after(name)), ", ".join(tk_fp) or "none",
                     first_text(bw.after(name)) if burrow_ok else "n/a",
                     (", ".join(bw_fp) or "none") if burrow_ok else "n/a"])
    print_table(["SCENARIO", "TOOLKIT (fleetctl stuck)", "TOOLKIT FALSE POS.", "BURROW", "BURROW FALSE POS."],
                rows)

    print("\ndetection: seconds from the fault to the fault's verdict (else to the first alarm, and which), "
          "end to end")
    delays: dict[str, dict[str, float | None]] = {"toolkit": {}, "burrow": {}}
    rows = []
    for name in ("stalled", "stopped", "rewound", "slow"):
        cells = [name]
        for who, seen, want, alarms in (("toolkit", tk, TOOLKIT_EXPECTED[name], ALARMS),
                                         ("burrow", bw, BURROW_EXPECTED[name], BURROW_ALARMS)):
            after = seen.after(name)
            got = want if want in after else min((s for s in after if s in alarms), key=after.get, default=None)
            delays[who][name] = after[got] if got else None
            cells.append("n/a" if who == "burrow" and not burrow_ok else f"{want} never" if got is None
                         else f"{want} {after[got]:.1f} s" if got == want else f"{got} {after[got]:.1f} s (not {want})")
        rows.append(cells)
    print_table(["SCENARIO", "TOOLKIT", "BURROW"], rows)

    print("\nwall time of each whole fleetctl process (s), exit codes")
    rows = []
    for what in ("collect", "stuck", "lag"):
        t = times[what]
        counts = {c: codes[what].count(c) for c in sorted(set(codes[what]))}
        rows.append([f"fleetctl {what}", f"{statistics.median(t):.2f}" if t else "-", f"{max(t):.2f}" if t else "-",
                     str(len(t)), ", ".join(f"{c}: {n}x" for c, n in counts.items())])
    print_table(["COMMAND", "MEDIAN", "MAX", "RUNS", "EXIT CODES"], rows)
    starts = times["cycle starts"]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    if gaps:
        print(f"a cycle started every {statistics.median(gaps):.1f} s (median; wanted every {args.interval:.0f} s), "
              f"{len(starts)} cycles; load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
              f"{os.cpu_count()} cores")

    def met(ok: bool) -> str:
        return "met" if ok else "NOT MET"

    def worst(who):
        d = [delays[who][n] for n in ("stalled", "stopped")]
        return None if None in d else max(d)

    print("\ntargets")
    rows = []
    for what in ("collect", "stuck", "lag"):
        m = statistics.median(times[what]) if times[what] else None
        rows.append([f"fleetctl {what} (median)", f"<= {CLI_TARGET:.0f} s", "-" if m is None else f"{m:.2f} s",
                     met(m is not None and m <= CLI_TARGET), "-"])
    tw, bwst = worst("toolkit"), worst("burrow") if burrow_ok else None
    rows.append(["STALLED / STOPPED after the fault", f"<= {DETECT_TARGET:.0f} s",
                 "never" if tw is None else f"{tw:.1f} s", met(tw is not None and tw <= DETECT_TARGET),
                 "n/a" if not burrow_ok else "never" if bwst is None else
                 f"{bwst:.1f} s ({met(bwst <= DETECT_TARGET)})"])
    rows.append(["false positives", "0", str(len(fp["toolkit"])), met(not fp["toolkit"]),
                 str(len(fp["burrow"])) if burrow_ok else "n/a"])
    print_table(["TARGET", "WANTED", "TOOLKIT", "", "BURROW"], rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between incident cycles")
    ap.add_argument("--fault-after", type=float, default=100.0, help="seconds of normal traffic before the fault")
    ap.add_argument("--after-fault", type=float, default=110.0, help="seconds observed after the fault")
    ap.add_argument("--window", default="15m", help="the stuck rules' window (fleetctl's default)")
    ap.add_argument("--burrow", help="the Burrow binary (default: built into the cache, else Burrow on PATH)")
    ap.add_argument("--keep", action="store_true", help="leave the benchmark's lab running")
    args = ap.parse_args()

    binary, how = burrow_binary(args.burrow)
    burrow_problem = None if binary else f"Burrow: none to run ({how})"
    burrow_name = burrow_version(binary) if binary else ""
    print(f"Burrow {burrow_name}: {binary} ({how})" if binary else red(burrow_problem, sys.stdout), flush=True)

    load = os.getloadavg()
    lab, version = bench_lab("lab")
    started = not lab.running()
    if started:
        print(f"starting the benchmark lab (Kafka {version}, {lab.spec.brokers} brokers) ...", flush=True)
        lab.up()
    firsts = {"toolkit": Firsts(), "burrow": Firsts()}
    times: dict[str, list] = {"collect": [], "stuck": [], "lag": [], "cycle starts": []}
    codes: dict[str, list] = {"collect": [], "stuck": [], "lag": []}
    burrow = None
    try:
        with tempfile.TemporaryDirectory(prefix="bench-incident-") as tmp:
            tmp = Path(tmp)
            import yaml

            (tmp / "fleet.yaml").write_text(yaml.safe_dump(lab.spec.fleet_document()))
            env = dict(os.environ, FLEET_FILE=str(tmp / "fleet.yaml"), FLEET_DATA_ROOT=str(tmp / "data"),
                       **lab.spec.connection_env())
            if binary:
                folder = lab.spec.path / "burrow"  # this run's config and log (kept until the next run)
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                burrow = Burrow(binary, lab, version, folder)
                try:
                    burrow.start()
                    print(f"Burrow listening on 127.0.0.1:{burrow.port}", flush=True)
                except (RuntimeError, OSError) as e:
                    burrow_problem = f"Burrow could not start on the 0.9 lab: {e}"
                    print(red(burrow_problem, sys.stdout), flush=True)
                    burrow.stop()
                    burrow = None
            try:
                run(args, lab, version, env, firsts, burrow, times, codes)
            finally:
                if burrow:
                    if not burrow.seen_groups:
                        burrow_problem = (f"Burrow never reported the benchmark's groups ({burrow.errors} failed "
                                          f"requests); its log ({burrow.log}): {burrow.log_tail()}")
                    print(f"Burrow: {burrow.stop()}", flush=True)
    finally:
        if started and not args.keep:
            for line in lab.down():
                print(line)

    report(args, firsts, burrow_name or "(none)", burrow_problem is None, times, codes, load)
    if burrow_problem:
        print("\n" + red(f"NO BURROW FIGURES: {burrow_problem}", sys.stdout))
        return 1
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # the finally blocks have stopped Burrow, the traffic and the lab
        raise SystemExit("interrupted: what this run started is stopped") from None
