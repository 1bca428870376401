"""The stuck job in this process, for small inputs: the same outputs as
spark_jobs/stuck_partitions.py without Spark's start-up.

A scheduled run over a few hundred or thousand snapshot rows spends 20-60 s starting a JVM and
Python workers for well under a second of work. Below `SMALL_ROWS` input rows (on a local path) the
job runs here instead: the same `columnar.task_facts` the Spark tasks run (on the whole input as one
task), then the same rules (`rules.judge`, `rules.storm_verdict`, `timelag.History`), and writes the
same files: findings.jsonl, groups.jsonl, series.jsonl and, given a data root, the `stuck_findings`
and `stuck_groups` datasets. tests/spark/test_stuck_inprocess.py runs both on the same rows and
compares every field.

Nothing here imports Spark: numpy and pyarrow only.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections import defaultdict

from fleetkit.core import inprocess as core_inprocess
from fleetkit.core.datasets import TS, publish_rows
from fleetkit.core.inprocess import (  # noqa: F401 - is_local, readable_here: the job asks here
    input_files, is_local, iso_micro_z, local_path, readable_here)
from fleetkit.stuck import rules, timelag
from fleetkit.stuck.columnar import GROUP_KEYS, KEYS, TP_KEYS, task_facts, unpack_points

JOB = "stuck_partitions"
#: inputs up to this many rows are judged in process (a deployment may change it with the
#: FLEET_STUCK_INPROCESS_MAX_ROWS environment variable; 0 always uses Spark): fleetkit.core.inprocess
SMALL_ROWS = core_inprocess.LIMITS[JOB][1]
#: the report charts this many flagged partitions (as the Spark job's lag_series)
SERIES_LIMIT = 500
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: findings.jsonl's columns, in the Spark job's order
FINDING_COLUMNS = ("cluster", "topic", "partition", "source", "group", "status", "lag", "committed_offset",
                   "log_start_offset", "log_end_offset", "assigned", "window_start", "window_end", "snapshots",
                   "reason", "unchanged_since", "confidence", "stalled_since", "stopped_since", "judged_from",
                   "offset_expires_at", "expires_in_seconds", "lag_seconds", "lag_seconds_kind",
                   "lag_seconds_error")
_FINDING_TIMES = ("window_start", "window_end", "unchanged_since", "stalled_since", "stopped_since", "judged_from",
                  "offset_expires_at")
GROUP_COLUMNS = ("cluster", "source", "group", "status", "total_lag", "counts", "judged_from", "rebalance_storm",
                 "storm_kind", "rebalances", "rejoins", "group_wide_stop", "storm_fix")


def max_rows() -> int:
    return core_inprocess.max_rows(JOB)


def small_input(path: str, since: dt.date | None = None) -> bool:
    """Whether the job's input is small enough to judge in process (and on a local path)."""
    return core_inprocess.small_input(JOB, path, since)


def read_snapshots(parquet: list[str], jsonl: list[str]):
    """The input as one table of the offsets_snapshots schema (columns a file lacks are null)."""
    return core_inprocess.read_table(parquet, jsonl, "offsets_snapshots")


def _seconds_ts(seconds: float | None) -> dt.datetime | None:
    """A time in epoch seconds as a timestamp, truncated to the microsecond as Spark's
    timestamp_seconds does."""
    if seconds is None:
        return None
    return EPOCH + dt.timedelta(microseconds=int(seconds * 1_000_000))


def _utc(t: dt.datetime | None) -> dt.datetime | None:
    if t is None:
        return None
    return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t.astimezone(dt.timezone.utc)


def _default(value, fallback):
    return fallback if value is None else value


def evaluate(snapshots, window: dt.timedelta, as_of: dt.datetime | None = None,
             ratio: float = rules.DEFAULT_LAG_GROWTH_RATIO,
             retention: dt.timedelta = rules.DEFAULT_OFFSETS_RETENTION) -> tuple[list[dict], list[dict], dt.datetime]:
    """The Spark job's evaluate on a table of offsets_snapshots rows -> (findings, groups, as_of),
    each a list of dicts with the job's columns (times as aware datetimes)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = snapshots.set_column(snapshots.schema.get_field_index("source"), "source",
                             pc.fill_null(snapshots["source"], "kafka"))
    if as_of is None:
        newest = pc.max(t["observed_at"]).as_py() if t.num_rows else None
        as_of = _utc(newest) or dt.datetime.now(dt.timezone.utc)
    words = sorted({w for c in ("rejoin_cause", "assignor") for w in t[c].to_pylist() if w is not None})
    code = {w: i + 1 for i, w in enumerate(words)}
    lo_us, hi_us = ((x - EPOCH) // dt.timedelta(microseconds=1) for x in (as_of - window, as_of))
    task = t.select([*KEYS, "observed_at", "committed_offset", "log_start_offset", "log_end_offset", "assigned",
                     "commit_interval_seconds", "committed_at", "committed_record_timestamp", "generation",
                     "rejoins"])
    task = task.append_column("_rebalancing", pc.fill_null(pc.is_in(t["group_state"], value_set=pa.array(
        sorted(rules.REBALANCING), pa.string())), False))
    for name, column in (("_cause", "rejoin_cause"), ("_assignor", "assignor")):
        task = task.append_column(name, pa.array([code.get(w) for w in t[column].to_pylist()], pa.int64()))
    out = task_facts(task, lo_us, hi_us) if t.num_rows else None
    rows = out.to_pylist() if out is not None else []
    keys = [r for r in rows if r["_row"] == 0]
    group_facts = {tuple(r[k] for k in GROUP_KEYS): r for r in rows if r["_row"] == 1}
    points: dict[tuple, list] = defaultdict(list)
    for r in rows:
        if r["_row"] == 2:
            points[tuple(r[k] for k in TP_KEYS)].append(r["points"])
    at, window_seconds = as_of.timestamp(), window.total_seconds()
    fields = list(rules.Features.__dataclass_fields__)
    histories: dict[tuple, timelag.History] = {}
    findings = []
    for r in keys:
        windowed = (r["snapshots"] or 0) > 0
        facts = dict(r, snapshots=r["snapshots"] or 0,
                     span_seconds=(r["last_at"] - r["first_at"]).total_seconds() if windowed else 0.0,
                     rewound=_default(r["rewound"], False), never_moved=_default(r["never_moved"], False),
                     lag_never_decreased=_default(r["lag_never_decreased"], True) if windowed else False,
                     liveness_known=r["source"] not in rules.NO_LIVENESS_SOURCES, as_of=at,
                     streak=(None if r["streak"] is None else int(r["streak"])) if windowed else 0)
        v = rules.judge(rules.Features(**{f: facts[f] for f in fields}), window_seconds, ratio)
        c, e = r["latest_committed"], r["latest_log_end"]
        unchanged = _utc(r["unchanged_since"])
        stopped = v.status == "STOPPED"
        expires = unchanged + dt.timedelta(seconds=int(retention.total_seconds())) if stopped and unchanged else None
        tp = tuple(r[k] for k in TP_KEYS)
        history = histories.get(tp)
        if history is None:
            history = histories[tp] = timelag.History(unpack_points(points.get(tp, ())), at)
        est = history.estimate(c, r["record_ts"])
        findings.append({
            **{k: r[k] for k in ("cluster", "topic", "partition", "source", "group")},
            "status": v.status, "lag": None if c is None or e is None else e - c, "committed_offset": c,
            "log_start_offset": r["latest_log_start"], "log_end_offset": e, "assigned": r["latest_assigned"],
            "window_start": as_of - window, "window_end": as_of, "snapshots": facts["snapshots"],
            "reason": v.reason, "unchanged_since": unchanged, "confidence": v.confidence,
            "stalled_since": _seconds_ts(v.since) if v.status in ("STALLED", "FROZEN") else None,
            "stopped_since": _seconds_ts(v.since) if stopped else None,
            "judged_from": _seconds_ts(v.judged_from), "offset_expires_at": expires,
            "expires_in_seconds": int(expires.timestamp()) - int(at) if expires is not None else None,
            "lag_seconds": est.seconds, "lag_seconds_kind": est.kind, "lag_seconds_error": est.error_seconds})
    return findings, group_rollup(findings, group_facts, words), as_of


def group_rollup(findings: list[dict], group_facts: dict[tuple, dict], words: list[str]) -> list[dict]:
    """One row per group: its findings rolled up (worst status first, rules.GROUP_ORDER) and its
    rebalance-storm verdict (rules.storm_verdict of the group facts)."""
    by_group: dict[tuple, list[dict]] = defaultdict(list)
    for f in findings:
        by_group[tuple(f[k] for k in GROUP_KEYS)].append(f)
    rank = {s: i for i, s in enumerate(rules.GROUP_ORDER)}
    out = []
    for key, fs in by_group.items():
        counts: dict[str, int] = defaultdict(int)
        for f in fs:
            counts[f["status"]] += 1
        ranked = [f for f in fs if f["status"] in rank]
        status = min((f["status"] for f in ranked), key=rank.__getitem__, default="INSUFFICIENT_DATA")
        judged = [f["judged_from"] for f in ranked if f["judged_from"] is not None]
        lags = [f["lag"] for f in fs if f["lag"] is not None]
        g = group_facts.get(key)
        storm, kind, rebalances, rejoins, wide, fix = False, None, 0, 0, None, None
        if g is not None:
            def word(c):
                return words[c - 1] if c is not None and 0 < c <= len(words) else None
            storm, kind, rebalances, rejoins, wide, fix = rules.storm_verdict(
                g["times"] or 0, g["rebalancing"] or 0, int(g["rebalances"] or 0), int(g["rejoins"] or 0),
                word(g["cause_code"]), word(g["assignor_code"]))
        out.append({**dict(zip(GROUP_KEYS, key)), "status": status, "total_lag": sum(lags),
                    "counts": dict(sorted(counts.items())),
                    "judged_from": min(judged) if status == "INSUFFICIENT_DATA" and judged and ranked else None,
                    "rebalance_storm": bool(storm), "storm_kind": kind, "rebalances": _default(rebalances, 0),
                    "rejoins": _default(rejoins, 0), "group_wide_stop": wide, "storm_fix": fix})
    return out


def lag_series(findings: list[dict], snapshots, as_of: dt.datetime, window: dt.timedelta,
               limit: int = SERIES_LIMIT) -> list[dict]:
    """Lag over the window of the flagged partitions the report charts (the `limit` worst by status,
    then lag, then key), as the Spark job's lag_series."""
    rank = {s: i for i, s in enumerate(rules.GROUP_ORDER)}
    def worst_first(f):  # status, lag (nulls last), then the key (nulls first), as the Spark job orders them
        return (rank[f["status"]], f["lag"] is None, -(f["lag"] or 0),
                *((f[k] is not None, f[k] if f[k] is not None else "") for k in KEYS))

    flagged = sorted((f for f in findings if f["status"] in rules.FLAGGED), key=worst_first)[:limit]
    wanted = {tuple(f[k] for k in KEYS): f["status"] for f in flagged}
    if not wanted:
        return []
    lo = as_of - window
    series: dict[tuple, list] = defaultdict(list)
    for r in snapshots.to_pylist():
        key = (r["cluster"], r["source"] or "kafka", r["group"], r["topic"], r["partition"])
        t = _utc(r["observed_at"])
        if key not in wanted or t is None or not lo <= t <= as_of:
            continue
        c, e = r["committed_offset"], r["log_end_offset"]
        series[key].append({"t": iso_micro_z(t), "lag": None if c is None or e is None else e - c,
                            "committed_offset": c, "log_end_offset": e})

    def order(p):  # sort_array of structs: field by field, nulls first
        return tuple((v is not None, v) if v is not None else (False, 0) for v in p.values())

    return [{**dict(zip(KEYS, key)), "status": wanted[key], "points": sorted(pts, key=order)}
            for key, pts in series.items()]


def for_json(findings: list[dict]) -> list[dict]:
    return [{c: iso_micro_z(f[c]) if c in _FINDING_TIMES else f[c] for c in FINDING_COLUMNS} for f in findings]


def groups_for_json(groups: list[dict]) -> list[dict]:
    return [{c: iso_micro_z(g[c]) if c == "judged_from" else g[c] for c in GROUP_COLUMNS} for g in groups]


def _arrow_schemas():
    import pyarrow as pa

    s, i64, i32, f64, b = pa.string(), pa.int64(), pa.int32(), pa.float64(), pa.bool_()
    finding = pa.schema([("cluster", s), ("topic", s), ("partition", i32), ("source", s), ("group", s),
                         ("status", s), ("lag", i64), ("committed_offset", i64), ("log_start_offset", i64),
                         ("log_end_offset", i64), ("assigned", b), ("window_start", TS), ("window_end", TS),
                         ("snapshots", i64), ("reason", s), ("unchanged_since", TS), ("confidence", s),
                         ("stalled_since", TS), ("stopped_since", TS), ("judged_from", TS),
                         ("offset_expires_at", TS), ("expires_in_seconds", i64), ("lag_seconds", f64),
                         ("lag_seconds_kind", s), ("lag_seconds_error", f64)])
    group = pa.schema([("cluster", s), ("source", s), ("group", s), ("status", s), ("total_lag", i64),
                       ("counts", pa.map_(s, i64)), ("judged_from", TS), ("rebalance_storm", b),
                       ("storm_kind", s), ("rebalances", i32), ("rejoins", i32), ("group_wide_stop", b),
                       ("storm_fix", s)])
    return finding, group


def write_dataset(rows: list[dict], schema, data_root: str, dataset: str, run_stamp: str) -> str:
    """Append rows as Parquet to <root>/<dataset>/date=<day>/run=<stamp>/ (written to a _tmp
    folder, then renamed: readers never see a half-written run), as the Spark job does."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    day = dt.datetime.now(dt.timezone.utc).date().isoformat()
    table = pa.Table.from_pylist([{c: (list(r[c].items()) if c == "counts" else r[c]) for c in schema.names}
                                  for r in rows], schema=schema)
    root = core_inprocess.location(data_root).root
    folder = root.at(dataset, f"date={day}")
    final = folder / f"run={run_stamp}"
    if final.exists():
        raise FileExistsError(f"{final} already exists")
    tmp = folder / f"_tmp-run={run_stamp}-{uuid.uuid4().hex}"
    if root.local:
        os.makedirs(tmp.path)
        pq.write_table(table, f"{tmp.path}/part-00000.parquet")
        os.replace(tmp.path, final.path)
    else:
        # an object store has no rename: the one file is written under the _tmp- name, then copied whole
        try:
            pq.write_table(table, (tmp / "part-00000.parquet").path, filesystem=root.fs)
            root.fs.move((tmp / "part-00000.parquet").path, (final / "part-00000.parquet").path)
        finally:
            tmp.rmtree()
    return str(final)


def run(snapshots_path: str, out: str, window: dt.timedelta, as_of: dt.datetime | None, ratio: float,
        retention: dt.timedelta, data_root: str | None = None, since: dt.date | None = None) -> dict:
    """The whole job in process: read, judge, write the files; returns the job's summary line."""
    import time

    t0 = time.monotonic()
    parquet, jsonl = input_files(snapshots_path, since)
    if not parquet and not jsonl:
        raise SystemExit(f"input {snapshots_path!r} holds no .parquet or .jsonl files")
    snapshots = read_snapshots(parquet, jsonl)
    findings, groups, as_of = evaluate(snapshots, window, as_of, ratio, retention)
    folder = core_inprocess.location(out)
    folder.mkdir(parents=True, exist_ok=True)
    publish_rows(for_json(findings), folder / "findings.jsonl")
    publish_rows(groups_for_json(groups), folder / "groups.jsonl")
    publish_rows(lag_series(findings, snapshots, as_of, window), folder / "series.jsonl")
    folder.mark_done()
    if data_root:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        finding_schema, group_schema = _arrow_schemas()
        write_dataset(findings, finding_schema, data_root, "stuck_findings", stamp)
        write_dataset(groups, group_schema, data_root, "stuck_groups", stamp)
    statuses: dict[str, int] = defaultdict(int)
    for f in findings:
        statuses[f["status"]] += 1
    return {"as_of": as_of.isoformat().replace("+00:00", "Z"), "window_seconds": window.total_seconds(),
            "partitions": len(findings), "groups": len(groups), "statuses": dict(statuses),
            "seconds": round(time.monotonic() - t0, 1), "out": str(out), "engine": "in-process",
            "input_rows": snapshots.num_rows}
