"""fleetctl's incident commands: lag, stuck, offsets dump, offsets health.

They import no Airflow when the cluster's connections are AIRFLOW_CONN_<ID> variables in JSON form
(fleetkit.core.connections), so they answer in about a second; other connections resolve through
Airflow (fleet_airflow.clusters). Exit codes: fleetctl.output's one table (what the toolkit could not
see or judge it never calls OK).
"""

from __future__ import annotations

import datetime as dt
import json
import sys

from fleetkit.core.errors import FleetError

from fleetctl.connect import connected, load_cluster
from fleetctl.output import FLAGGED, ProgressBar, print_table, say_blind, say_not_judged, wrapped


def _window(args) -> dt.timedelta:
    from fleetkit.core.durations import parse_duration

    try:
        return parse_duration(args.window)
    except ValueError as e:
        raise FleetError(f"--window {args.window!r}: {e}") from None


def _history(args, cluster, as_of, window, groups=None) -> list[dict]:
    """The data root's rows of the last two windows (the rules look one window back for history)."""
    from fleet_airflow.settings import data_root
    from fleetkit.core.datasets import DataRoot, read_recent

    return read_recent(DataRoot(args.data_root or data_root()), "offsets_snapshots", cluster.name,
                       as_of - 2 * window, groups)


def _storm_lines(storms) -> list[str]:
    from fleetkit.core.render import visible_controls

    def moved(s) -> str:  # a KIP-848 group has no rebalances: its group epoch moves
        return f"group epoch up {s.rebalances}" if s.kind == "member_churn" else f"{s.rebalances} rebalance(s)"

    return [f"group {visible_controls(g)!s}: rebalance storm ({s.kind}): {moved(s)}, "
            f"{s.rejoins} rejoin(s) in the window. Fix: {s.fix}" for g, s in storms]


# -- lag ---------------------------------------------------------------------------------------
def cmd_lag(args) -> int:
    from fleetkit.collection.groups import collect_cluster
    from fleetkit.collection.zk_offsets import add_store_rows
    from fleetkit.core.datasets import utcnow
    from fleetkit.stuck import incident

    if not args.groups and not args.all:
        raise FleetError("name the groups (fleetctl lag GROUP... --cluster C) or give --all")
    if args.groups and args.all:
        raise FleetError("give either groups or --all, not both")
    cluster = load_cluster(args)
    window = _window(args)
    with connected(cluster, args.timeout, zookeeper=False, stores=False) as (kafka, _, _):
        if args.all:
            groups = sorted({g for g, _ in kafka.list_groups()} | set(cluster.groups))
        else:
            groups = list(dict.fromkeys(args.groups))
        result = collect_cluster(cluster, kafka, None, only=groups)
        if args.all:  # all groups: the listing is only all of them with DESCRIBE on the cluster
            result.refuse(kafka.listing_refusal())
        rows = result.rows["offsets_snapshots"]
        for r in rows:
            r.setdefault("source", "kafka")
        # the ZooKeeper offset stores (old consumers, Storm spouts): for --all, and for named groups
        # Kafka does not know
        in_kafka = {r["group"] for r in rows}
        if cluster.offset_stores and (args.all or any(g not in in_kafka for g in groups)):
            with connected(cluster, args.timeout, zookeeper=False) as (_, _, stores):
                store_rows = {"offsets_snapshots": []}
                add_store_rows(cluster, kafka, stores, store_rows, result.observed_at, result.problems)
            wanted = set(groups) if not args.all else None
            rows += [r for r in store_rows["offsets_snapshots"]
                     if wanted is None or (r["group"] in wanted and r["group"] not in in_kafka)]
            if args.all:
                groups = sorted(set(groups) | {r["group"] for r in rows})
    as_of = result.observed_at or utcnow()
    if result.blind and not rows:  # nothing seen: nothing to judge
        return say_blind(result.blind_lines())
    history = _history(args, cluster, as_of, window, groups)
    judged, storms = incident.judge_now(rows, history, as_of, window)
    missing = [g for g in groups if not any(j["group"] == g for j in judged)]
    parts, storming = incident.flagged(judged, storms)
    if args.json:
        print(json.dumps({"cluster": cluster.name, "observed_at": as_of.isoformat(), "window": args.window,
                          "partitions": [incident.lag_record(j) for j in judged],
                          "storms": {g: s._asdict() for g, s in storming},
                          "missing_groups": missing, "problems": result.problems,
                          "not_seen": [str(r) for r in result.refusals]}, indent=1))
    else:
        if judged:
            print_table(incident.LAG_COLUMNS, [incident.lag_cells(j) for j in judged])
        for line in _storm_lines(storming):
            print(line)
        for p in result.problems:
            print(f"problem: {p}", file=sys.stderr)
    unseen = set(result.unseen_groups)
    for g in missing:
        from fleetkit.core.render import visible_controls

        if g not in unseen:
            print(f"group {visible_controls(g)!s}: no committed offsets and no members on cluster {cluster.name}",
                  file=sys.stderr)
    if result.blind:
        return say_blind(result.blind_lines())
    if missing and len(missing) == len(groups) and not args.all:
        return 2
    return FLAGGED if parts or storming else say_not_judged(judged)


# -- stuck -------------------------------------------------------------------------------------
STUCK_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "VERDICT", "LAG", "LAG-TIME", "SINCE", "CONFIDENCE", "SOURCE",
                 "REASON")


def cmd_stuck(args) -> int:
    from fleet_airflow.settings import data_root
    from fleetkit.collection.groups import collect_rows
    from fleetkit.core.datasets import DataRoot
    from fleetkit.stuck import incident

    cluster = load_cluster(args)
    window = _window(args)
    root = DataRoot(args.data_root or data_root())
    with connected(cluster, args.timeout) as (kafka, zk, stores):
        result = collect_rows(cluster, kafka, zk, root, store_clients=stores)
    as_of = result.observed_at
    if result.blind and not result.rows["offsets_snapshots"]:  # nothing seen: nothing to judge
        return say_blind(result.blind_lines())
    history = _history(args, cluster, as_of, window)
    judged, storms = incident.judge_now(result.rows["offsets_snapshots"], history, as_of, window)
    parts, storming = incident.flagged(judged, storms)
    groups = {j["group"] for j in judged}
    if args.json:
        print(json.dumps({"cluster": cluster.name, "observed_at": as_of.isoformat(), "window": args.window,
                          "groups": len(groups), "partitions": len(judged),
                          "flagged": [incident.lag_record(j) for j in parts],
                          "storms": {g: s._asdict() for g, s in storming}, "problems": result.problems,
                          "not_seen": [str(r) for r in result.refusals]}, indent=1))
    else:
        print(f"cluster {cluster.name} (Kafka {cluster.kafka_version}) at {as_of:%Y-%m-%d %H:%M:%SZ}: "
              f"{len(groups)} group(s), {len(judged)} partition(s), window {args.window}, "
              f"{len(history)} history row(s)")
        if parts:
            print_table(STUCK_COLUMNS, [[j["group"], j["topic"], str(j["partition"]), j["verdict"].status,
                                         "-" if j["lag"] is None else str(j["lag"]),
                                         incident.lag_time_text(j["time_lag"]),
                                         incident.since_text(j["verdict"].since) or "-",
                                         j["verdict"].confidence or "-", j.get("source") or "kafka",
                                         j["verdict"].reason] for j in parts])
        for line in _storm_lines(storming):
            print(line)
        if not parts and not storming and not result.blind:
            print("nothing flagged" if not any(j["verdict"].status == "INSUFFICIENT_DATA" for j in judged)
                  else "nothing flagged among the partitions judged")
        for p in result.problems:
            print(f"problem: {p}", file=sys.stderr)
    if result.blind:  # blind is never "nothing flagged"
        return say_blind(result.blind_lines())
    return FLAGGED if parts or storming else say_not_judged(judged)


def add_parsers(sub) -> None:
    import argparse

    def common(sp):
        sp.add_argument("--cluster", required=True, help="cluster name from the fleet file")
        sp.add_argument("--fleet", help="fleet file (default: $FLEET_FILE)")
        sp.add_argument("--data-root", help="where the scheduled runs keep their snapshots (default: "
                                            "$FLEET_DATA_ROOT)")
        sp.add_argument("--window", default="15m", help="the rules' window (default 15m, as the scheduled run)")
        sp.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster (default 10)")
        sp.add_argument("--json", action="store_true", help="one JSON document instead of the table")

    lg = sub.add_parser(
        "lag", help="kafka-consumer-groups --describe plus time lag and verdict, read now",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=wrapped("Each partition of the groups: CURRENT-OFFSET, LOG-END-OFFSET and LAG read from the cluster "
                    "now (as kafka-consumer-groups --describe prints them), LAG-TIME (~: interpolated from the log "
                    "end history, >=: a lower bound, -: unknown) and the VERDICT of the stuck rules over the "
                    "recent snapshots in the data root plus this read."),
        epilog="example:\n  fleetctl lag orders-consumer billing --cluster lab\n  fleetctl lag --all --cluster "
               "lab43 --json")
    lg.add_argument("groups", nargs="*", metavar="GROUP")
    lg.add_argument("--all", action="store_true", help="every group the cluster lists (and the fleet file names)")
    common(lg)
    lg.set_defaults(func=cmd_lag)

    st = sub.add_parser(
        "stuck", help="the flagged partitions and rebalance storms now, as the scheduled run would report them",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=wrapped("Collects the cluster the way the scheduled run does (every group, commit times and rebalance "
                    "history from __consumer_offsets, the ZooKeeper offset stores), writes no dataset, and judges "
                    "with the stuck rules (no Spark) over the data root's recent snapshots plus this read."),
        epilog="example:\n  fleetctl stuck --cluster lab")
    common(st)
    st.set_defaults(func=cmd_stuck)


# -- offsets dump ------------------------------------------------------------------------------
#: the decoded fields that come from a record's key (the rest come from its value)
KEY_FIELDS = ("key_version", "kind", "group", "topic", "partition", "member_id", "regex")


def _json_default(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return str(v)


def dump_line(offset: int, key, value, where: str, extra: dict | None = None) -> str:
    """One JSON line of `offsets dump`: offset, the batch's facts, the decoded key and value (or
    `error` naming the record when they do not decode)."""
    from fleetkit.clients.offsets_codec import DecodeError, decode

    out = {"offset": offset, **(extra or {})}
    try:
        d = decode(key, value, where)
    except DecodeError as e:
        out["error"] = str(e)
        out["key_hex"] = key.hex() if key is not None else None
        return json.dumps(out, ensure_ascii=False, default=_json_default)
    tombstone = d.pop("tombstone", value is None)
    out["key"] = {k: d.pop(k) for k in KEY_FIELDS if k in d}
    if out["key"].get("kind") == "unknown":  # a record type this decoder does not know: not decoded
        out["unknown"] = True
        out["value_hex"] = None if value is None else bytes(value).hex()
    out["value"] = None if tombstone else d
    return json.dumps(out, ensure_ascii=False, default=_json_default)


class _Progress:
    """Counts records; on a terminal a progress bar on stderr (ProgressBar: how far into the file or
    the partition), elsewhere a line on stderr every `every` records; a summary line at the end."""

    def __init__(self, every: int = 1_000_000):
        import time

        self.every, self.n, self.t0, self.clock = every, 0, time.monotonic(), time.monotonic
        self.errors = 0
        self.bar: ProgressBar | None = None
        self.position = None  # () -> how far, in the bar's unit

    def show(self, what: str, total: int | None, unit: str, position) -> None:
        self.bar, self.position = ProgressBar(what, total, unit), position

    def tick(self) -> None:
        self.n += 1
        if self.bar is not None and self.bar.shown:
            if self.n % 1000 == 0:
                self.bar.update(self.position())
        elif self.n % self.every == 0:
            s = self.clock() - self.t0
            print(f"{self.n:,} records in {s:.1f}s ({self.n / s:,.0f}/s)", file=sys.stderr, flush=True)

    def done(self, what: str) -> None:
        if self.bar is not None:
            self.bar.close()
        s = max(self.clock() - self.t0, 1e-9)
        print(f"{what}: {self.n:,} records in {s:.1f}s ({self.n / s:,.0f}/s)"
              + (f", {self.errors} not decodable" if self.errors else ""), file=sys.stderr)


def cmd_offsets_dump(args) -> int:
    from fleetkit.clients import log_format

    if bool(args.segment) == bool(args.cluster):
        raise FleetError("give --segment FILE, or --cluster C --partition N")
    out = sys.stdout
    progress = _Progress()
    write = out.write
    if args.segment:
        import os

        if not os.path.isfile(args.segment):
            raise FleetError(f"--segment {args.segment!r}: no such file")
        report = log_format.SegmentReport()
        shown = 0

        def show_corrupt():  # each corrupt entry where the reading reached it, on stdout and stderr
            nonlocal shown
            for c in report.corrupt[shown:]:
                write(json.dumps({"offset": c.offset, "position": c.position, "corrupt": c.reason},
                                 ensure_ascii=False) + "\n")
                print(f"corrupt: {args.segment} at byte {c.position} (offset {c.offset}): {c.reason}; its records "
                      "are not decoded", file=sys.stderr)
            shown = len(report.corrupt)

        with open(args.segment, "rb", buffering=1 << 20) as f:
            progress.show(os.path.basename(args.segment), os.path.getsize(args.segment), "bytes", f.tell)
            try:
                for r in log_format.read_segment(f, args.segment, report):
                    if len(report.corrupt) > shown:
                        show_corrupt()
                    if r.offset < args.from_offset:
                        continue
                    extra = {"timestamp": r.timestamp, "magic": r.magic,
                             "compression": log_format.COMPRESSION.get(r.codec, r.codec)}
                    if r.producer_id >= 0:
                        extra["producer_id"] = r.producer_id
                    if r.control:
                        write(json.dumps({"offset": r.offset, **extra, "control": r.control}) + "\n")
                    else:
                        line = dump_line(r.offset, r.key, r.value, f"{args.segment} offset {r.offset}", extra)
                        progress.errors += '"error": ' in line
                        write(line + "\n")
                    progress.tick()
            except log_format.FormatError as e:
                out.flush()
                raise FleetError(f"--segment {args.segment!r}: {e}") from None
            show_corrupt()
        out.flush()
        progress.done(args.segment)
        if report.truncated_tail:
            print(f"{args.segment}: the last {report.truncated_tail} byte(s) are not a whole entry (a segment "
                  "being written, or a cut copy): not read", file=sys.stderr)
        if report.corrupt:
            print(f"{args.segment}: {len(report.corrupt)} corrupt entr{'y' if len(report.corrupt) == 1 else 'ies'} "
                  "(CRC or bounds), not decoded", file=sys.stderr)
            return FLAGGED
        return 0
    if args.partition is None:
        raise FleetError("--cluster needs --partition N (a partition of __consumer_offsets)")
    from fleetkit.collection.offsets_topic import OFFSETS_TOPIC, read_records

    cluster = load_cluster(args)
    if not 0 <= args.partition < cluster.offsets_topic_partitions:
        raise FleetError(f"--partition {args.partition}: {OFFSETS_TOPIC} of cluster {cluster.name!r} has partitions "
                         f"0..{cluster.offsets_topic_partitions - 1}")

    at = [args.from_offset]

    def on_record(p, off, key, value):
        at[0] = off
        line = dump_line(off, key, value, f"{OFFSETS_TOPIC}-{p} offset {off}")
        progress.errors += '"error": ' in line
        write(line + "\n")
        progress.tick()

    with connected(cluster, args.timeout, zookeeper=False, stores=False) as (kafka, _, _):
        start, end, _ = kafka.log_offsets([(OFFSETS_TOPIC, args.partition)])[(OFFSETS_TOPIC, args.partition)]
        if start is not None and end is not None:
            first = max(start, args.from_offset)
            last = min(end, args.to_offset) if args.to_offset is not None else end
            at[0] = first
            progress.show(f"{OFFSETS_TOPIC}-{args.partition}", max(last - first, 0), "offsets",
                          lambda: at[0] - first)
        res = read_records(cluster.name, kafka, [args.partition],
                           {args.partition: args.from_offset} if args.from_offset else {},
                           on_record=on_record,
                           ends={args.partition: args.to_offset} if args.to_offset is not None else None)
    out.flush()
    progress.done(f"{OFFSETS_TOPIC}-{args.partition} of {cluster.name} (reader {res.reader})")
    for p in res.problems:
        print(f"problem: {p}", file=sys.stderr)
    return FLAGGED if res.corrupt_batches else 0


def add_offsets_parsers(o_sub) -> None:
    import argparse

    od = o_sub.add_parser(
        "dump", help="every record of a __consumer_offsets segment file or partition, decoded, one JSON line each",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=wrapped("The content kafka-dump-log --offsets-decoder shows, as JSON lines, streaming, without a "
                    "JVM: message formats v0-v2, batches compressed with gzip, snappy, lz4 or zstd; control "
                    "records (transaction markers) of a segment file as {\"control\": ...}. Each line: offset, "
                    "timestamp, magic, compression, key (key_version, kind, group, topic, partition ...), value "
                    "(null for a tombstone); a record that does not decode carries \"error\" (naming it) and its "
                    "key in hex; a record type this decoder does not know has key kind \"unknown\" and "
                    "\"unknown\": true. Every batch's CRC (CRC32C; CRC32 for message formats v0/v1) and "
                    "lengths are checked first: a corrupt entry is not decoded, it is a line {\"offset\", "
                    "\"position\", \"corrupt\": reason} and a line on stderr, and the file is read on. "
                    "Progress and a summary go to stderr."),
        epilog="examples:\n  fleetctl offsets dump --segment /var/kafka/data/__consumer_offsets-17/00000000000000000000.log"
               "\n  fleetctl offsets dump --cluster lab --partition 17 --from 1200000 | jq 'select(.group == \"billing\")'"
               "\n\n3 (flagged): corrupt entries found (CRC or lengths; named, not decoded, the rest dumped)")
    od.add_argument("--segment", metavar="FILE", help="a segment file (.log) of __consumer_offsets")
    od.add_argument("--cluster", help="or: read from the cluster (fleet file name) ...")
    od.add_argument("--partition", type=int, help="... this partition of __consumer_offsets")
    od.add_argument("--from", dest="from_offset", type=int, default=0, help="first offset (default: the log start)")
    od.add_argument("--to", dest="to_offset", type=int, help="with --cluster: stop before this offset (default: the "
                                                             "log end when the command starts)")
    od.add_argument("--fleet", help="fleet file (default: $FLEET_FILE)")
    od.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster (default 10)")
    od.set_defaults(func=cmd_offsets_dump)


# -- offsets health ----------------------------------------------------------------------------
HEALTH_COLUMNS = ("BROKER", "PARTITION", "VERDICT", "DISK", "RECORDS", "LIVE-KEYS", "LARGEST-SEGMENT", "ONE-PASS")


def _size(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024


def cmd_offsets_health(args) -> int:
    """Read the new __consumer_offsets records and the segment inventory into the data root (the
    scheduled collect_offsets step), run the trim_health job on them (in process for a small data
    root, else Spark, local), print the
    cluster's verdicts and fixes."""
    import subprocess
    import tempfile
    import time
    from pathlib import Path

    from fleet_airflow.settings import data_root, fleet_file, spark_env
    from fleetkit.collection.offsets_topic import OFFSETS_TOPIC, collect_offsets_topic
    from fleetkit.core.datasets import DataRoot, read_jsonl

    cluster = load_cluster(args)
    root_path = args.data_root or data_root()
    t0 = time.monotonic()
    print(f"reading the new records of __consumer_offsets of {cluster.name} into {root_path} ...", file=sys.stderr,
          flush=True)
    bar = ProgressBar(f"{OFFSETS_TOPIC} of {cluster.name}", None, "records")
    try:
        with connected(cluster, args.timeout, zookeeper=False, stores=False) as (kafka, _, _):
            res = collect_offsets_topic(cluster, kafka, DataRoot(root_path), on_progress=bar.update)
    finally:
        bar.close()
    print(f"  {res.records_written:,} records in {time.monotonic() - t0:.1f}s; {res.summary()}", file=sys.stderr,
          flush=True)
    for p in res.problems:
        print(f"problem: {p}", file=sys.stderr)
    import importlib.util

    # the installed job, run as a script (as spark-submit would): found, not imported
    job = Path(importlib.util.find_spec("fleet_spark_jobs").origin).parent / "trim_health.py"
    with tempfile.TemporaryDirectory(prefix="fleetctl-health-") as out:
        t1 = time.monotonic()
        from fleetkit.trim import inprocess

        small = inprocess.small_input(root_path)  # decided once: the job is told which engine
        engine = "in process: a small data root" if small else f"Spark {args.master}"
        print(f"judging with the trim_health job ({engine}) ...", file=sys.stderr, flush=True)
        env = spark_env()  # the job's own minimal environment, none of this shell's secrets
        run = subprocess.run([sys.executable, str(job), "--data-root", root_path, "--fleet", args.fleet or fleet_file(),
                              "--out", out, "--master", args.master,
                              "--engine", "in-process" if small else "spark"], capture_output=True, text=True, env=env)
        if run.returncode != 0:
            raise FleetError(f"the trim_health job failed ({run.returncode}): {run.stderr.strip()[-1500:]}")
        rows = [r for r in read_jsonl(Path(out) / "health.jsonl") if r["cluster"] == cluster.name]
    print(f"  judged in {time.monotonic() - t1:.1f}s", file=sys.stderr, flush=True)
    rows.sort(key=lambda r: (r["verdict"] == "HEALTHY", r["partition"], r["broker"]))
    bad = [r for r in rows if r["verdict"] != "HEALTHY"]
    if args.json:
        print(json.dumps({"cluster": cluster.name, "replicas": rows}, indent=1, default=str))
    else:
        shown = rows if args.all else bad
        print(f"cluster {cluster.name} (Kafka {cluster.kafka_version}): {len(rows)} replica(s) of __consumer_offsets, "
              f"{len(bad)} not healthy")
        if shown:
            print_table(HEALTH_COLUMNS, [[str(r["broker"]), str(r["partition"]), r["verdict"], _size(r["disk_bytes"]),
                                          f"{r['records'] or 0:,}", f"{r['live_keys'] or 0:,}",
                                          f"{r['largest_segment_messages'] or 0:,}", f"{r['keys_per_pass'] or 0:,}"]
                                         for r in shown])
        for r in bad:
            print(f"\nbroker {r['broker']} partition {r['partition']}: {r['verdict']}: {r['reason']}")
            if r.get("fix"):
                fix = json.loads(r["fix"])
                settings = ", ".join(f"{k}={v}" for k, v in fix.items() if k.startswith("log."))
                print(f"  fix: {settings} (apply: {fix.get('apply')}); then the runbook_trim DAG "
                      "(dry run first) if the partition must shrink now")
    return FLAGGED if bad else 0


def add_health_parser(o_sub) -> None:
    import argparse

    oh = o_sub.add_parser(
        "health", help="__consumer_offsets verdicts (bloated, cleaner stalled, over capacity) and the fix, now",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=wrapped("Reads the new records of __consumer_offsets and the segment inventory into the data "
                          "root (what the scheduled collect_offsets step does), runs the trim_health job on "
                          "them (in process for up to FLEET_TRIM_INPROCESS_MAX_ROWS records, 1,000,000 by default: "
                          "seconds; above that Spark, local) and prints the replicas that "
                          "are not healthy, with the reason and the cleaner setting that fixes it."),
        epilog="example:\n  fleetctl offsets health --cluster lab")
    oh.add_argument("--cluster", required=True, help="cluster name from the fleet file")
    oh.add_argument("--fleet", help="fleet file (default: $FLEET_FILE)")
    oh.add_argument("--data-root", help="data root (default: $FLEET_DATA_ROOT)")
    oh.add_argument("--master", default="local[2]", help="Spark master for a data root too large to judge in process (default local[2])")
    oh.add_argument("--all", action="store_true", help="list healthy replicas too")
    oh.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster (default 10)")
    oh.add_argument("--json", action="store_true", help="every replica as JSON")
    oh.set_defaults(func=cmd_offsets_health)
