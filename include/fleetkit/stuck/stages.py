"""The stuck job's stages as functions over Arrow tables: one definition, run by both engines.

    task(rows)                 a group's rows -> its partitions' findings, its roll-up, its log end
                               points (columnar.task_facts, then rules.judge and rules.storm_verdict)
    with_time_lag(f, points)   findings of some topic partitions + every point of those partitions
                               -> the findings with lag_seconds (timelag.History)
    chart(flagged, rows)       the `SERIES_LIMIT` worst flagged partitions' lag over the window

The Spark job (spark_jobs/stuck.py) only moves data between them: it partitions the rows
by group and runs `task` in each task (mapInArrow), meets findings and points per bucket of topic
partitions (cogroup + applyInArrow) to run `with_time_lag`, and hands `chart` the flagged rows it
collects. fleetkit.stuck.inprocess runs each stage once on the whole input. The outputs' columns are
declared once, in fleetkit.core.datasets.FINDINGS (stuck_findings, stuck_groups, stuck_series).

No Spark, no pandas: numpy and pyarrow.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from fleetkit.core.datasets import FINDINGS
from fleetkit.core.inprocess import iso_micro_z
from fleetkit.stuck import rules, timelag
from fleetkit.stuck.columnar import GROUP_KEYS, KEYS, TP_KEYS, task_facts, unpack_points

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: the report charts this many flagged partitions
SERIES_LIMIT = 500
FINDING = FINDINGS["stuck_findings"]
GROUP = FINDINGS["stuck_groups"]
SERIES = FINDINGS["stuck_series"]
#: what with_time_lag adds to a finding
TIME_LAG = ("lag_seconds", "lag_seconds_kind", "lag_seconds_error")
#: what `task` yields of a finding (its rows of kind 0) and with_time_lag reads
FINDING_INPUT = [*(c for c in FINDING.names if c not in TIME_LAG), "record_ts"]


def _task_schema() -> pa.Schema:
    """What `task` yields, one table: `_row` (0 a finding, 1 a group, 2 a topic partition's log end
    points), the findings' columns without TIME_LAG plus `record_ts` (the timestamp of the record at
    the committed offset, which with_time_lag reads), the groups' columns a finding has not, and
    `points`; null where a row is of another kind."""
    fields = [pa.field("_row", pa.int32())] + [f for f in FINDING if f.name not in TIME_LAG]
    fields.append(pa.field("record_ts", pa.float64()))  # FINDING_INPUT
    fields += [f for f in GROUP if f.name not in FINDING.names]
    fields.append(pa.field("points", pa.binary()))
    return pa.schema(fields)


TASK_SCHEMA = _task_schema()


def _micros(t: dt.datetime) -> int:
    return (t - EPOCH) // dt.timedelta(microseconds=1)


def _seconds_ts(seconds: float | None) -> dt.datetime | None:
    """A time in epoch seconds as a timestamp, truncated to the microsecond."""
    if seconds is None:
        return None
    return EPOCH + dt.timedelta(microseconds=int(seconds * 1_000_000))


def utc(t: dt.datetime | None) -> dt.datetime | None:
    if t is None:
        return None
    return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t.astimezone(dt.timezone.utc)


def _default(value, fallback):
    return fallback if value is None else value


class Judgement:
    """What a run judges by: the time, the window, the lag growth ratio, offsets.retention, and the
    vocabulary of rejoin causes and assignors the task input's codes point into."""

    def __init__(self, as_of: dt.datetime, window: dt.timedelta, ratio: float, retention: dt.timedelta,
                 words: list[str]):
        self.as_of, self.window, self.ratio, self.retention, self.words = as_of, window, ratio, retention, words
        self.lo_us, self.hi_us = _micros(as_of - window), _micros(as_of)

    def word(self, code: int | None) -> str | None:
        return self.words[code - 1] if code is not None and 0 < code <= len(self.words) else None


def finding(r: dict, j: Judgement) -> dict:
    """A partition's finding from its facts (a key row of columnar.task_facts), without TIME_LAG."""
    windowed = (r["snapshots"] or 0) > 0
    at = j.as_of.timestamp()
    facts = dict(r, snapshots=r["snapshots"] or 0,
                 span_seconds=(r["last_at"] - r["first_at"]).total_seconds() if windowed else 0.0,
                 rewound=_default(r["rewound"], False), never_moved=_default(r["never_moved"], False),
                 trend_snapshots=_default(r["trend_snapshots"], 0), trend_span=_default(r["trend_span"], 0.0),
                 trend_third=_default(r["trend_third"], 0), trend_advanced=_default(r["trend_advanced"], False),
                 trend_dip=_default(r["trend_dip"], 0),
                 liveness_known=rules.liveness_known(r["source"], r["latest_assigned"]), as_of=at,
                 streak=(None if r["streak"] is None else int(r["streak"])) if windowed else 0)
    v = rules.judge(rules.Features(**{f: facts[f] for f in _FEATURES}), j.window.total_seconds(), j.ratio)
    c, e = r["latest_committed"], r["latest_log_end"]
    unchanged = utc(r["unchanged_since"])
    stopped = v.status == "STOPPED"
    expires = (unchanged + dt.timedelta(seconds=int(j.retention.total_seconds()))
               if stopped and unchanged else None)
    return {**{k: r[k] for k in ("cluster", "topic", "partition", "source", "group")},
            "status": v.status, "lag": None if c is None or e is None else e - c, "committed_offset": c,
            "log_start_offset": r["latest_log_start"], "log_end_offset": e, "assigned": r["latest_assigned"],
            "window_start": j.as_of - j.window, "window_end": j.as_of, "snapshots": facts["snapshots"],
            "reason": v.reason, "unchanged_since": unchanged, "confidence": v.confidence,
            "stalled_since": _seconds_ts(v.since) if v.status in ("STALLED", "FROZEN") else None,
            "stopped_since": _seconds_ts(v.since) if stopped else None,
            "judged_from": _seconds_ts(v.judged_from), "offset_expires_at": expires,
            "expires_in_seconds": int(expires.timestamp()) - int(at) if expires is not None else None,
            "record_ts": r["record_ts"]}


_FEATURES = list(rules.Features.__dataclass_fields__)
_RANK = {s: i for i, s in enumerate(rules.GROUP_ORDER)}


def rollup(findings: list[dict], group_facts: dict[tuple, dict], j: Judgement) -> list[dict]:
    """One row per group of `findings` (every finding of each group): its findings rolled up (worst
    status first, rules.GROUP_ORDER) and its rebalance-storm verdict (rules.storm_verdict of its
    facts, a group row of columnar.task_facts)."""
    by_group: dict[tuple, list[dict]] = defaultdict(list)
    for f in findings:
        by_group[tuple(f[k] for k in GROUP_KEYS)].append(f)
    out = []
    for key, fs in by_group.items():
        counts: dict[str, int] = defaultdict(int)
        for f in fs:
            counts[f["status"]] += 1
        ranked = [f for f in fs if f["status"] in _RANK]
        status = min((f["status"] for f in ranked), key=_RANK.__getitem__, default="INSUFFICIENT_DATA")
        judged = [f["judged_from"] for f in ranked if f["judged_from"] is not None]
        lags = [f["lag"] for f in fs if f["lag"] is not None]
        g = group_facts.get(key)
        storm, kind, rebalances, rejoins, wide, fix = False, None, 0, 0, None, None
        if g is not None:
            storm, kind, rebalances, rejoins, wide, fix = rules.storm_verdict(
                g["times"] or 0, g["rebalancing"] or 0, int(g["rebalances"] or 0), int(g["rejoins"] or 0),
                j.word(g["cause_code"]), j.word(g["assignor_code"]))
        out.append({**dict(zip(GROUP_KEYS, key)), "status": status, "total_lag": sum(lags),
                    "counts": sorted(counts.items()),
                    # a group not judged yet: about when its partitions' history is enough
                    "judged_from": min(judged) if status == "INSUFFICIENT_DATA" and judged else None,
                    "rebalance_storm": bool(storm), "storm_kind": kind, "rebalances": _default(rebalances, 0),
                    "rejoins": _default(rejoins, 0), "group_wide_stop": wide, "storm_fix": fix})
    return out


def task(table, j: Judgement):
    """Every row of some groups (whenever observed; GROUP_ID and PACKED columns as the Spark job
    sends them, or plain ones) -> one table (TASK_SCHEMA) of their findings, groups and log end
    points; None for no rows."""
    facts = task_facts(table, j.lo_us, j.hi_us)
    if facts is None:
        return None
    kind = facts.column("_row")
    keys = facts.filter(pc.equal(kind, 0)).to_pylist()
    findings = [finding(r, j) for r in keys]
    group_facts = {tuple(r[k] for k in GROUP_KEYS): r for r in facts.filter(pc.equal(kind, 1)).to_pylist()}
    groups = rollup(findings, group_facts, j)
    points = facts.filter(pc.equal(kind, 2))
    judged = pa.Table.from_pylist([{**f, "_row": 0} for f in findings] + [{**g, "_row": 1} for g in groups],
                                  schema=TASK_SCHEMA)
    if not points.num_rows:
        return judged
    return pa.concat_tables([judged, pa.Table.from_arrays(
        [points.column(f.name).cast(f.type) if f.name in ("_row", *TP_KEYS, "points") else pa.nulls(len(points), f.type)
         for f in TASK_SCHEMA], schema=TASK_SCHEMA)])


def task_kind(out, n: int, columns):
    """The rows of one kind (0 findings, 1 groups, 2 points) of task output, with `columns`."""
    return out.filter(pc.equal(out.column("_row"), n)).select(list(columns))


def with_time_lag(findings, points, as_of: dt.datetime):
    """`findings` (task rows of kind 0: the finding columns and record_ts) of some topic partitions
    and every log end point of those partitions (TP_KEYS, points: from any number of tasks) ->
    the findings with TIME_LAG, in stuck_findings' columns. The Spark job runs it per bucket of topic
    partitions; a partition's history is built once whichever groups read it."""
    by_tp: dict[tuple, list] = defaultdict(list)
    for r in points.select([*TP_KEYS, "points"]).to_pylist():
        by_tp[tuple(r[k] for k in TP_KEYS)].append(r["points"])
    at = as_of.timestamp()
    histories: dict[tuple, timelag.History] = {}
    lags: dict[str, list] = {c: [] for c in TIME_LAG}
    for r in findings.select([*TP_KEYS, "committed_offset", "record_ts"]).to_pylist():
        tp = tuple(r[k] for k in TP_KEYS)
        history = histories.get(tp)
        if history is None:
            history = histories[tp] = timelag.History(unpack_points(by_tp.get(tp, ())), at)
        est = history.estimate(r["committed_offset"], r["record_ts"])
        for c, v in zip(TIME_LAG, (est.seconds, est.kind, est.error_seconds)):
            lags[c].append(v)
    return pa.Table.from_arrays(
        [pa.array(lags[f.name], f.type) if f.name in TIME_LAG else findings.column(f.name).cast(f.type)
         for f in FINDING], schema=FINDING)


def worst_flagged(flagged, limit: int = SERIES_LIMIT) -> list[dict]:
    """The `limit` worst of some findings (KEYS, status, lag) that are flagged: by status
    (rules.GROUP_ORDER), then lag (nulls last), then the key (nulls first), so the choice is the same
    on every run -> [{KEYS..., status}]."""
    def order(f):
        return (_RANK[f["status"]], f["lag"] is None, -(f["lag"] or 0),
                *((f[k] is not None, f[k] if f[k] is not None else "") for k in KEYS))

    rows = [f for f in flagged.select([*KEYS, "status", "lag"]).to_pylist() if f["status"] in rules.FLAGGED]
    return [{**{k: f[k] for k in KEYS}, "status": f["status"]} for f in sorted(rows, key=order)[:limit]]


def chart(chosen: list[dict], rows, as_of: dt.datetime, window: dt.timedelta):
    """The lag series (stuck_series) of `chosen` (worst_flagged) from snapshot rows (KEYS,
    observed_at, committed_offset, log_end_offset; any others are skipped): the points in the window,
    in time order."""
    wanted = {tuple(f[k] for k in KEYS): f["status"] for f in chosen}
    series: dict[tuple, list] = defaultdict(list)
    lo = as_of - window
    for r in rows.select([*KEYS, "observed_at", "committed_offset", "log_end_offset"]).to_pylist():
        key = (r["cluster"], r["source"] or "kafka", r["group"], r["topic"], r["partition"])
        t = utc(r["observed_at"])
        if key not in wanted or t is None or not lo <= t <= as_of:
            continue
        c, e = r["committed_offset"], r["log_end_offset"]
        series[key].append({"t": iso_micro_z(t), "lag": None if c is None or e is None else e - c,
                            "committed_offset": c, "log_end_offset": e})

    def order(p):  # field by field, nulls first
        return tuple((v is not None, v) if v is not None else (False, 0) for v in p.values())

    return pa.Table.from_pylist([{**dict(zip(KEYS, key)), "status": wanted[key], "points": sorted(pts, key=order)}
                                 for key, pts in series.items()], schema=SERIES)


def as_json(table) -> list[dict]:
    """Rows of an output table as its JSON Lines file holds them: times as ISO-8601 strings ending
    in Z, a map as an object."""
    times = [f.name for f in table.schema if pa.types.is_timestamp(f.type)]
    maps = [f.name for f in table.schema if pa.types.is_map(f.type)]
    rows = table.to_pylist()
    for r in rows:
        for c in times:
            r[c] = iso_micro_z(r[c])
        for c in maps:
            r[c] = dict(r[c]) if r[c] is not None else None
    return rows


