"""Benchmark: one Prometheus scrape of a fleet of 100,000 partitions, every partition published
(target: under Prometheus' default 10 s scrape timeout, cold, with both name sets).

    .venv/bin/python bench/metrics_scrape.py [--groups 10000] [--partitions-per-group 10]
        [--flagged 0.1] [--runs 5]

Writes a data root with the writers the tasks and jobs use (write_collection: the collect task's
newest offsets_snapshots file per cluster, with the member holding each partition; publish_rows:
the report task's reports/stuck/latest and the jobs' JSON Lines; record_status: the collect task;
write_approval: the approval task): groups x partitions (a share of the groups flagged, with one to
all of their partitions flagged), five clusters, __consumer_offsets health of 3 brokers x 50
partitions per cluster, coordinator ownership, 20 pending approvals. Then times what GET
/fleet/metrics does after authentication: building the collector's families from the read model
and encoding them (prometheus_client's text encoder, and OpenMetrics), cold (the read model's
caches cleared: the first scrape after a collection or a stuck run wrote its files) and warm (the
next scrapes), with kafka-lag-exporter's names (the default) and with KMinion's beside them. Prints
each median, the series, the bytes and the process's peak memory.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "include")]

from measure import synthetic_fleet, timed  # noqa: E402

from fleetkit.collection.groups import record_status  # noqa: E402
from fleetkit.core.datasets import DataRoot, newest_collection, publish_rows, write_collection  # noqa: E402
from fleetkit.core.runbook import write_approval  # noqa: E402
from fleetkit.fleetview import FleetView, _cache  # noqa: E402
from fleetkit.metrics import FleetCollector, collector, scrape  # noqa: E402

#: Prometheus' default scrape_timeout
TARGET = 10.0
CLUSTERS = ["lab", "lab39", "lab43", "prod-eu", "prod-us"]
FLAGGED = ["LAGGING"] * 4 + ["STALLED"] * 3 + ["STOPPED"] * 2 + ["OUT_OF_RANGE"]


def iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


def generate(root: Path, groups: int, per_group: int, flagged: float) -> int:
    rnd = random.Random(7)
    now = dt.datetime.now(dt.timezone.utc)
    group_rows, findings = [], []
    snapshots: dict[str, list] = {c: [] for c in CLUSTERS}
    for i in range(groups):
        cluster = CLUSTERS[i % len(CLUSTERS)]
        name = f"team-{i % 97}.service-{i}.consumer"
        bad = rnd.random() < flagged
        status = rnd.choice(FLAGGED) if bad else "OK"
        bad_parts = rnd.randint(1, per_group) if bad else 0
        total = 0
        for p in range(per_group):
            st = status if p < bad_parts else "OK"
            lag = rnd.randint(1, 50_000) if st != "OK" else rnd.randint(0, 3)
            total += lag
            findings.append({"cluster": cluster, "source": "kafka", "group": name, "topic": f"topic-{i % 300}",
                             "partition": p, "status": st, "lag": lag, "committed_offset": 10_000,
                             "log_end_offset": 10_000 + lag, "reason": "generated", "window_end": iso(now),
                             "lag_seconds": lag / 100, "lag_seconds_kind": "interpolated" if lag else "exact",
                             "lag_seconds_error": 5.0, "stalled_since": iso(now) if st == "STALLED" else None})
            member = f"consumer-{name}-{p % 3}"
            snapshots[cluster].append({
                "cluster": cluster, "group": name, "topic": f"topic-{i % 300}", "partition": p, "observed_at": now,
                "committed_offset": 10_000, "log_start_offset": 0, "log_end_offset": 10_000 + lag,
                "group_state": "Stable", "assigned": True, "member_client_id": member,
                "member_id": f"{member}-{rnd.getrandbits(128):032x}", "member_host": f"10.{i % 250}.{p}.7"})
        group_rows.append({"cluster": cluster, "source": "kafka", "group": name, "status": status,
                           "counts": {status: bad_parts, "OK": per_group - bad_parts} if bad else {"OK": per_group},
                           "total_lag": total, "state": "Stable", "rebalance_storm": i % 500 == 0,
                           "storm_kind": "restart" if i % 500 == 0 else None, "rebalances": 0, "rejoins": 0})
    latest = root / "reports" / "stuck" / "latest"
    latest.mkdir(parents=True)
    publish_rows(group_rows, latest / "groups.jsonl")
    publish_rows(findings, latest / "findings.jsonl")
    publish_rows([], latest / "series.jsonl")
    data = DataRoot(str(root))
    for c in CLUSTERS:
        write_collection(data, c, now, {"offsets_snapshots": snapshots[c]})
    for c in CLUSTERS:
        record_status(data, c, ok={"observed_at": iso(now), "groups": groups // len(CLUSTERS), "problems": []})
    health = [{"cluster": c, "broker": b, "partition": p, "verdict": "BLOATED" if p == 17 and b == 0 else "HEALTHY",
               "disk_bytes": rnd.randint(10**6, 10**9)} for c in CLUSTERS for b in range(3) for p in range(50)]
    (root / "reports" / "offsets" / "run1").mkdir(parents=True)
    publish_rows(health, root / "reports" / "offsets" / "run1" / "health.jsonl")
    coord = [{"cluster": c, "partition": p, "verdict": "LOADING" if p == 17 else "OK", "loading": 5 if p == 17 else 0,
              "mismatch": 0, "unavailable": 0, "not_ok_seconds": 120 if p == 17 else None}
             for c in CLUSTERS for p in range(50)]
    (root / "reports" / "coordinator" / "run1").mkdir(parents=True)
    publish_rows(coord, root / "reports" / "coordinator" / "run1" / "partitions.jsonl")
    for i in range(20):
        write_approval(str(root / "plans"), "runbook_stuck_skip", f"manual__{i}",
                       {"dag_id": "runbook_stuck_skip", "run_id": f"manual__{i}", "answer": None,
                        "requested_at": iso(now - dt.timedelta(minutes=i))})
    return len(findings)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--partitions-per-group", type=int, default=10)
    ap.add_argument("--flagged", type=float, default=0.1, help="share of the groups flagged")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    fleet = synthetic_fleet(CLUSTERS)
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        root = Path(tmp)
        t, n = timed(lambda: generate(root, args.groups, args.partitions_per_group, args.flagged))
        size = sum(p.stat().st_size for p in (root / "reports" / "stuck" / "latest").iterdir()) / 2**20
        print(f"generated {args.groups:,} groups, {n:,} partitions ({size:,.0f} MiB of job output) in {t:.1f}s")
        view = FleetView(root)

        def one(accept=None, compress=False, background=False):
            return scrape(FleetCollector(view, fleet, refresh_in_background=background), accept,
                          compress=compress)[0]

        def cleared():
            _cache.clear()  # the read model's parses
            collector._section = None  # the built and encoded partitions

        def newer_collection(i: int) -> None:
            """One cluster's newest collection again under a later collection time (what the next
            collect task writes)."""
            files = newest_collection(DataRoot(str(root)), "offsets_snapshots", CLUSTERS[0])
            t = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=i + 1)).strftime("%Y%m%dT%H%M%S%fZ")
            for f in files:
                shutil.copy(f, Path(f).with_name(f"part-{t}-{i:012x}.parquet"))

        ok = True
        for names in ("kafka-lag-exporter", "kafka-lag-exporter,kminion"):
            cleared()
            os.environ["FLEET_METRICS_NAMES"] = names
            cold = []
            for _ in range(args.runs):
                cleared()
                cold.append(timed(one)[0])
            warm = [timed(one)[0] for _ in range(args.runs)]
            om = "application/openmetrics-text; version=1.0.0"
            warm_om = [timed(lambda: one(om))[0] for _ in range(args.runs)]
            gz = [timed(lambda: one(compress=True))[0] for _ in range(args.runs)]  # (the first compresses the section)
            packed = one(compress=True)
            body = one()
            series = sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))
            flagged = len(view.flagged_partitions().rows)
            published = view.current_partitions(CLUSTERS).size
            print(f"FLEET_METRICS_NAMES={names}: {published:,} partitions published ({flagged:,} flagged); one "
                  f"scrape: {series:,} series, {len(body) / 2**20:.1f} MiB of text")
            print(f"  scrape, cold (read the collections and the stuck run + build + encode): median "
                  f"{statistics.median(cold):.3f}s (max {max(cold):.3f}; the first {cold[0]:.3f}s)")
            print(f"  scrape, warm (cached read model; build + encode):   median {statistics.median(warm):.3f}s "
                  f"(max {max(warm):.3f})")
            print(f"  scrape, warm, OpenMetrics:                         median {statistics.median(warm_om):.3f}s")
            print(f"  scrape, gzip (Prometheus' Accept-Encoding): first {gz[0]:.3f}s (compresses the section once), "
                  f"then median {statistics.median(gz[1:] or gz):.3f}s; {len(packed) / 2**20:.1f} MiB on the wire")
            # the api-server's path: a newer collection lands; the scrape that finds it gets the
            # series before at once while the newest are built (and encoded as asked before) in a thread
            one(compress=True, background=True)
            noticed, built, after = [], [], []
            for i in range(args.runs):
                newer_collection(len(noticed) + 100 * len(names))
                noticed.append(timed(lambda: one(compress=True, background=True))[0])
                t0 = time.monotonic()
                while collector._building:
                    time.sleep(0.01)
                built.append(time.monotonic() - t0)
                after.append(timed(lambda: one(compress=True, background=True))[0])
            print(f"  api-server, a newer collection: the scrape that finds it median {statistics.median(noticed):.3f}s "
                  f"(max {max(noticed):.3f}; the series before), built off the request path in "
                  f"{statistics.median(built):.3f}s, the next scrape {statistics.median(after):.3f}s")
            ok = ok and statistics.median(cold) < TARGET and max(noticed) < TARGET
            print(f"  RESULT scrape of {n:,} partitions: cold {statistics.median(cold):.3f}s, warm "
                  f"{statistics.median(warm):.3f}s, {len(body) / 2**20:.1f} MiB")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak memory of this process (the api-server's share of a scrape, plus the data generated): "
              f"{peak:,.0f} MiB")
        print(f"RESULT {'MET' if ok else 'NOT MET'} (target: cold median < {TARGET:.0f}s, Prometheus' default "
              "scrape_timeout)")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
