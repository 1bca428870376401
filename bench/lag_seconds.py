"""Benchmark: the error of `lag_seconds` against the truth, on a real broker at a varying rate.

    FLEET_TEST_PORT_OFFSET=3000 .venv/bin/python bench/lag_seconds.py [--interval 5] [--cluster lab43] [--keep]

Starts the benchmark's own lab of the cluster's generation (0.9 by default; the `bench` slot of the
tests' port plan, as bench/collect_offsets.py). The estimate reads log end offsets, which every
generation has; on 0.10+ (`--cluster lab39` or `lab43`) it is also refined by the timestamp of
the record at each position, read the way the collection does (`KafkaCluster.record_timestamps`),
and both are printed: from the history alone and with the record timestamps.
A producer writes to one partition in phases, remembering when the broker acknowledged each
record (the truth of its append time, within a few ms):

  steady 20/s for 60 s, a ramp from 5/s to 100/s over 40 s, a pause of 40 s, a burst of 3,000
  records, steady 20/s for 30 s

Every `--interval` seconds it reads the partition's log end offset the way the collection does
(`KafkaCluster.log_offsets`). At each of those times it takes consumers at known positions (1,
10, 100, 1,000 and 3,000 records behind the log end, and at the records appended 5, 30, 90 and 200
seconds earlier), estimates their time lag with `fleetkit.stuck.timelag.estimate` from the history
collected so far, and compares it with the truth (as_of minus the append time of the record at the
position). Prints, per kind, the count and the distribution of |estimate - truth|, whether the truth
lay within the stated error (interpolated) or above the bound (bounded), and the target: p99 error
at most one snapshot interval while the lag is within the collected history.
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "include"), str(REPO / "plugins"), str(REPO / "bench"), str(REPO)]

from fleetlab.paths import load_airflow_env  # noqa: E402  (the lab's deployment: airflow.env)

load_airflow_env()

from collect_offsets import bench_lab  # noqa: E402
from fleetkit.clients.kafka import KafkaCluster, client_config  # noqa: E402
from fleetkit.collection.groups import RECORD_TIMESTAMPS_SINCE  # noqa: E402
from fleetkit.core.fleet import version_tuple  # noqa: E402
from fleetkit.stuck.timelag import estimate  # noqa: E402
from fleetlab.traffic import producer, wait_topic  # noqa: E402

TOPIC = f"lag-seconds-{time.strftime('%H%M%S')}"
RECORDS_BEHIND = (1, 10, 100, 1000, 3000)
SECONDS_BEHIND = (5, 30, 90, 200)


def phases():
    """(name, duration s, rate at fraction f of the phase) ..."""
    return [("steady", 60, lambda f: 20.0), ("ramp", 40, lambda f: 5 + 95 * f), ("pause", 40, lambda f: 0.0),
            ("burst", 1, None), ("steady", 30, lambda f: 20.0)]


def produce(bootstrap: str, version: str, appended: dict[int, float], stop: threading.Event,
            phase_log: list) -> None:
    prod = producer(bootstrap, version)

    def acked(err, msg):
        if err is None:
            appended[msg.offset()] = time.time()

    for name, seconds, rate in phases():
        start = time.monotonic()
        phase_log.append((name, time.time()))
        if rate is None:  # the burst: as fast as the client goes
            for i in range(3000):
                prod.produce(TOPIC, value=b"burst", partition=0, on_delivery=acked)
                if i % 500 == 0:
                    prod.poll(0)
            prod.flush(30)
            continue
        while not stop.is_set():
            f = (time.monotonic() - start) / seconds
            if f >= 1:
                break
            r = rate(f)
            # waiting inside poll(): acknowledgements are timed as they arrive, also during the pause
            next_at = time.monotonic() + (0.2 if r <= 0 else 1.0 / r)
            if r > 0:
                prod.produce(TOPIC, value=name.encode(), partition=0, on_delivery=acked)
            while not stop.is_set() and time.monotonic() < next_at:
                prod.poll(max(0.0, next_at - time.monotonic()))
    prod.flush(30)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between log end snapshots")
    ap.add_argument("--keep", action="store_true", help="leave the benchmark's lab running")
    ap.add_argument("--cluster", default="lab", help="the lab cluster whose Kafka generation to run (lab: 0.9)")
    args = ap.parse_args()

    lab, version = bench_lab(args.cluster)
    with_ts = version_tuple(version) >= RECORD_TIMESTAMPS_SINCE
    started = not lab.running()
    if started:
        print(f"starting the benchmark lab (Kafka {version}) ...", flush=True)
        lab.up()
    samples = defaultdict(list)   # kind -> [(abs error, within stated error / bound, within history)]
    stamped = defaultdict(list)   # the same with the record timestamps (0.10+)
    try:
        bootstrap = lab.spec.bootstrap
        wait_topic(bootstrap, TOPIC, kafka_version=version)
        kafka = KafkaCluster("bench", client_config({"bootstrap.servers": bootstrap}, version))
        appended: dict[int, float] = {}
        stop = threading.Event()
        phase_log: list = []
        t = threading.Thread(target=produce, args=(bootstrap, version, appended, stop, phase_log), daemon=True)
        t.start()
        history: list[tuple[float, int]] = []
        total = sum(p[1] for p in phases()) + 10
        start = time.monotonic()
        while time.monotonic() - start < total:
            time.sleep(args.interval - (time.monotonic() - start) % args.interval)
            _, end, err = kafka.log_offsets([(TOPIC, 0)])[(TOPIC, 0)]
            as_of = time.time()
            if err or end is None:
                print(f"log end not readable: {err}")
                continue
            history.append((as_of, end))
            known = sorted(o for o in list(appended) if o < end)
            if not known:
                continue
            times = [appended[o] for o in known]
            positions = {end - n for n in RECORDS_BEHIND if end - n >= 0}
            for s in SECONDS_BEHIND:
                k = bisect.bisect_right(times, as_of - s) - 1
                if k >= 0:
                    positions.add(known[k])
            for pos in sorted(positions):
                if pos not in appended:
                    continue
                truth = as_of - appended[pos]
                record_ts = kafka.record_timestamps({(TOPIC, 0): pos})[(TOPIC, 0)] if with_ts else None
                for out, ts in ((samples, None), (stamped, record_ts)) if with_ts else ((samples, None),):
                    est = estimate(pos, history, as_of, ts)
                    err = abs(est.seconds - truth)
                    held = (err <= est.error_seconds + 0.05 if est.kind in ("interpolated", "exact")
                            else est.seconds <= truth + 0.05)
                    out[est.kind].append((err, held, pos >= history[0][1]))
            kafka_phase = phase_log[-1][0] if phase_log else "-"
            print(f"t={time.monotonic() - start:5.1f}s phase {kafka_phase:6} log end {end:6d} "
                  f"positions {len(positions)}", flush=True)
        stop.set()
        t.join(30)
        kafka.close()
    finally:
        if started and not args.keep:
            for line in lab.down():
                print(line)

    met = True
    for title, table in [("from the log end history alone", samples)] + (
            [("with the timestamps of the records at the positions", stamped)] if with_ts else []):
        print(f"\nKafka {version}, {title}:")
        print(f"{'kind':13} {'n':>5} {'p50 err':>8} {'p90':>7} {'p99':>7} {'max':>7}  truth within error / above bound")
        for kind in ("exact", "interpolated", "bounded", "unknown"):
            rows = table.get(kind, [])
            errs = [e for e, _, _ in rows]
            held = sum(1 for _, h, _ in rows if h)
            print(f"{kind:13} {len(rows):5d} {pct(errs, .5):8.2f} {pct(errs, .9):7.2f} {pct(errs, .99):7.2f} "
                  f"{max(errs) if errs else float('nan'):7.2f}  {held}/{len(rows)}")
        inside = [e for k in ("exact", "interpolated") for e, _, w in table.get(k, []) if w]
        p99 = pct(inside, .99)
        met = met and bool(inside) and p99 <= args.interval and all(h for rows in table.values() for _, h, _ in rows)
        print(f"within the history: {len(inside)} estimates, p99 error {p99:.2f}s, mean {statistics.fmean(inside):.2f}s"
              if inside else "no estimate within the history")
    print(f"\nRESULT interval={args.interval:.0f}s target: p99 error <= one snapshot interval within the history, "
          f"truth always within the stated error or above the bound: {'MET' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
