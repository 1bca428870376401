"""Verdicts now, for a person in an incident: the pure rules over the rows read a moment ago and
the recent snapshots of the data root (fleetctl lag / stuck; no Spark).

The scheduled run judges each partition's window of offsets_snapshots rows; here the window is
the data root's recent rows plus the rows just read (`now_rows`), judged by the same
`rules.features` / `rules.judge` / `rules.storm`, so a verdict here is the one the next scheduled
run reports (give or take the rows collected in between). A row read now carries no commit time;
when the data root's latest row of that partition shows the same committed offset, its commit
time and rhythm are carried over (the offset has not changed since).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from fleetkit.core.durations import short_duration
from fleetkit.core.kafka_names import printed_host
from fleetkit.stuck import rules, timelag

#: columns of `fleetctl lag`: kafka-consumer-groups --describe's, then the toolkit's
#: kafka-consumer-groups --describe's columns in its order (a script reading them by position keeps
#: working), then the toolkit's
LAG_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
               "CLIENT-ID", "LAG-TIME", "VERDICT")
CARRIED = ("committed_at", "commit_interval_seconds")


def _key(r: dict) -> tuple:
    return (r.get("source") or "kafka", r["group"], r["topic"], r["partition"])


def carry_commit_times(now_rows: list[dict], history: list[dict]) -> int:
    """Give rows read now the commit time and rhythm of the latest history row of the same
    partition when it shows the same committed offset. Returns how many rows got them."""
    latest: dict[tuple, dict] = {}
    for r in history:
        k = _key(r)
        if k not in latest or r["observed_at"] > latest[k]["observed_at"]:
            latest[k] = r
    n = 0
    for r in now_rows:
        h = latest.get(_key(r))
        if h is None or h.get("committed_offset") != r.get("committed_offset") or r.get("committed_offset") is None:
            continue
        for c in CARRIED:
            if r.get(c) is None and h.get(c) is not None:
                r[c] = h[c]
        n += 1
    return n


def judge_now(now_rows: list[dict], history: list[dict], as_of: dt.datetime,
              window: dt.timedelta = rules.DEFAULT_WINDOW,
              ratio: float = rules.DEFAULT_LAG_GROWTH_RATIO) -> tuple[list[dict], dict[str, rules.Storm]]:
    """One dict per partition read now (sorted by group, topic, partition): the row's offsets and
    member, `lag`, `time_lag` (timelag.TimeLag), `verdict` (rules.Verdict), `snapshots` (rows of the
    window judged). And each group's storm verdict over the window."""
    carry_commit_times(now_rows, history)
    by_part: dict[tuple, list[dict]] = defaultdict(list)
    by_group: dict[str, list[dict]] = defaultdict(list)
    lo = as_of - window
    for r in history + now_rows:
        if r["observed_at"] <= as_of:
            by_part[_key(r)].append(r)
            if r["observed_at"] >= lo:
                by_group[r["group"]].append(r)
    out = []
    for r in sorted(now_rows, key=lambda r: (r["group"], r["topic"], r["partition"], r.get("source") or "")):
        rows = by_part[_key(r)]
        f = rules.features(rows, as_of, window)
        c, end = r.get("committed_offset"), r.get("log_end_offset")
        out.append({**r, "lag": None if c is None or end is None else end - c,
                    "time_lag": timelag.for_rows(rows, as_of.timestamp()),
                    "verdict": rules.judge(f, window.total_seconds(), ratio), "snapshots": f.snapshots})
    storms = {g: rules.storm(rows) for g, rows in by_group.items()}
    return out, storms


def flagged(judged: list[dict], storms: dict[str, rules.Storm]) -> tuple[list[dict], list[tuple[str, rules.Storm]]]:
    """What the scheduled run alerts on: partitions with an alerting or REWOUND / LAGGING verdict,
    and groups in a rebalance storm."""
    parts = [j for j in judged if j["verdict"].status not in ("OK", "NO_COMMIT", "INSUFFICIENT_DATA")]
    return parts, sorted(((g, s) for g, s in storms.items() if s.storm), key=lambda x: x[0])


def lag_time_text(t: timelag.TimeLag) -> str:
    """LAG-TIME: '0s', '~7m', '>=2h5m', '-' (unknown)."""
    if t.kind == "unknown" or t.seconds is None or (t.kind == "bounded" and t.seconds < 1):
        return "-"  # (a bound of 0 s says nothing: no log end history yet)
    text = short_duration(t.seconds).replace(" min", "m").replace(" ", "")  # one word per cell
    return {"exact": text, "bounded": f">={text}"}.get(t.kind, f"~{text}")


def since_text(since: float | None) -> str | None:
    if since is None:
        return None
    return dt.datetime.fromtimestamp(since, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def lag_record(j: dict) -> dict:
    """The machine form of one judged partition (fleetctl lag --json / stuck --json)."""
    v, t = j["verdict"], j["time_lag"]
    return {"cluster": j.get("cluster"), "group": j["group"], "topic": j["topic"], "partition": j["partition"],
            "source": j.get("source") or "kafka",
            "current_offset": j.get("committed_offset"), "log_end_offset": j.get("log_end_offset"),
            "log_start_offset": j.get("log_start_offset"), "lag": j["lag"],
            "lag_seconds": t.seconds, "lag_seconds_kind": t.kind, "lag_seconds_error": t.error_seconds,
            "verdict": v.status, "reason": v.reason, "since": since_text(v.since), "confidence": v.confidence,
            "snapshots": j["snapshots"], "group_state": j.get("group_state"),
            "consumer_id": j.get("member_id"), "host": j.get("member_host"), "client_id": j.get("member_client_id")}


def lag_cells(j: dict) -> list[str]:
    """One line of `fleetctl lag`'s table, in LAG_COLUMNS order ('-' for unknown, as Kafka prints)."""
    def cell(v):
        return "-" if v is None else str(v)
    return [j["group"], j["topic"], str(j["partition"]), cell(j.get("committed_offset")),
            cell(j.get("log_end_offset")), cell(j["lag"]), cell(j.get("member_id")),
            cell(printed_host(j.get("member_host"), j.get("source"))),
            cell(j.get("member_client_id")), lag_time_text(j["time_lag"]), j["verdict"].status]
