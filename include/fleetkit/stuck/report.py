"""The stuck-partitions report: read the job's output, render HTML and Markdown, list alerts."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from fleetkit.stuck import rules as stuck
from fleetkit.stuck.timelag import TimeLag
from fleetkit.core.datasets import as_path, read_jsonl
from fleetkit.core.render import render


REPORT_LIMIT = 500  # partitions listed in a report; findings.jsonl has them all


def _epoch(iso: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def lag_chart(points: list[dict], width: int = 300, height: int = 96) -> str:
    """An inline SVG of lag (records) over time (UTC), with axes, their units and end labels. Only
    numbers and times this module formats go into it (no names)."""
    pts = [(_epoch(p.get("t")), p["lag"]) for p in points if p.get("lag") is not None]
    pts = [(t, v) for t, v in pts if t is not None]
    if len(pts) < 2:
        return ""
    left, right, top_m, bottom = 52, 8, 8, 30
    w, h = width - left - right, height - top_m - bottom
    t0, t1 = pts[0][0], pts[-1][0]
    span = max(t1 - t0, 1e-9)
    top = max(max(v for _, v in pts), 1)
    coords = " ".join(f"{left + (t - t0) / span * w:.1f},{top_m + h - (v / top) * h:.1f}" for t, v in pts)

    def hhmmss(t: float) -> str:
        return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime("%H:%M:%S")

    axis = f"M{left},{top_m} V{top_m + h} H{left + w}"
    label = f"lag from {int(pts[0][1]):,} to {int(pts[-1][1]):,} records between {hhmmss(t0)} and {hhmmss(t1)} UTC"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="{label}" font-size="9" font-family="sans-serif">'
            f'<path d="{axis}" stroke="#555" fill="none"/>'
            f'<text x="{left - 3}" y="{top_m + 7}" text-anchor="end">{int(top):,}</text>'
            f'<text x="{left - 3}" y="{top_m + h}" text-anchor="end">0</text>'
            f'<text x="{left - 3}" y="{top_m + h / 2 + 3:.0f}" text-anchor="end">records</text>'
            f'<text x="{left}" y="{top_m + h + 11}">{hhmmss(t0)}</text>'
            f'<text x="{left + w}" y="{top_m + h + 11}" text-anchor="end">{hhmmss(t1)}</text>'
            f'<text x="{left + w / 2:.0f}" y="{top_m + h + 22}" text-anchor="middle">time (UTC), '
            f'{humanize(t1 - t0) if t1 - t0 >= 60 else f"{int(t1 - t0)}s"} shown</text>'
            f'<polyline fill="none" stroke="#c0392b" stroke-width="2" points="{coords}"/></svg>')


def humanize(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    sign = "" if seconds >= 0 else "-"
    s = abs(int(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, _ = divmod(s, 60)
    return sign + (f"{d}d {h}h" if d else f"{h}h {m}m" if h else f"{m}m")


def behind(f: dict) -> str:
    """'3,578 records, about 7 min behind' for a finding (the job's lag and lag_seconds columns)."""
    if f.get("lag") is None:
        return "lag unknown"
    records = f"{int(f['lag']):,} record{'s' if f['lag'] != 1 else ''}"
    kind = f.get("lag_seconds_kind")
    if not kind:
        return records
    return f"{records}, {TimeLag(f.get('lag_seconds'), kind, f.get('lag_seconds_error')).describe()}"


STORM_KINDS = {
    "poll_interval": "members evicted after max.poll.interval.ms while processing a poll's records",
    "restart": "members leaving and coming back as new members (restarts or session timeouts)",
    "session": "static members whose session timed out before they came back",
    "rebalancing": "rebalancing in at least half of the window's snapshots",
    "member_churn": "members of a KIP-848 consumer group leaving and joining again",
}


def storm_what(g: dict) -> str:
    """The evidence of a group's rebalance storm in one phrase (groups.jsonl fields)."""
    kind = g.get("storm_kind") or "rebalancing"
    parts = [STORM_KINDS.get(kind, kind)]
    if g.get("rejoins"):
        parts.append(f"{g['rejoins']} rejoin(s)")
    kip848 = kind == "member_churn"
    if g.get("rebalances"):
        parts.append(f"group epoch up {g['rebalances']} in the window" if kip848
                     else f"{g['rebalances']} rebalance(s) in the window")
    if g.get("group_wide_stop") is True:
        parts.append("each one stops the whole group")
    elif kip848:
        parts.append("no group-wide stop")
    elif g.get("group_wide_stop") is False:
        parts.append("cooperative: no group-wide stop")
    return "; ".join(parts)


def storm_fix(g: dict) -> str:
    """The fix a group's storm calls for (groups written before `storm_fix`: the state rule's)."""
    return g.get("storm_fix") or stuck.STORM_FIXES["rebalancing"]


def readable_time(iso: str | dt.datetime | None) -> str | None:
    """'2026-01-01 00:58:00 UTC' for an ISO-8601 time as the job writes it, or a datetime as Arrow
    reads it (naive: UTC); unchanged if unparsable."""
    if not iso:
        return None
    try:
        t = iso if isinstance(iso, dt.datetime) else dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    t = t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t.astimezone(dt.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(since: str | None, as_of: str | None) -> str | None:
    """'3m' for an ISO-8601 `since` three minutes before `as_of` (both as the job writes them)."""
    if not since or not as_of:
        return None
    try:
        a = dt.datetime.fromisoformat(since.replace("Z", "+00:00"))
        b = dt.datetime.fromisoformat(as_of.replace("Z", "+00:00"))
    except ValueError:
        return None
    seconds = (b - a).total_seconds()
    return humanize(seconds) if seconds >= 60 else f"{max(0, int(seconds))}s"


@dataclass
class StuckReport:
    findings: list[dict]
    groups: list[dict]
    series: dict = field(default_factory=dict)
    generated_at: str = ""
    window: str = ""
    #: clusters whose newest collection was blind, failed or is stale: {"cluster", "line"} (see_collections)
    blind: list[dict] = field(default_factory=list)

    def see_collections(self, statuses: dict[str, dict]) -> None:
        """Note the clusters (name -> collection_status.json) whose newest collection did not see
        everything (fleetkit.collection.blind): the report names them first, in red, with one line."""
        from fleetkit.collection.blind import current_state

        self.blind = [{"cluster": name, "line": state["line"]} for name, status in statuses.items()
                      for state in [current_state(status)] if state["state"] in ("BLIND", "FAILING", "STALE")]

    @classmethod
    def load(cls, out_dir: str | Path, window: str = "") -> "StuckReport":
        out = as_path(out_dir)
        series = {(s["cluster"], s.get("source") or "kafka", s["group"], s["topic"], s["partition"]): s["points"]
                  for s in read_jsonl(out / "series.jsonl")}
        return cls(findings=read_jsonl(out / "findings.jsonl"), groups=read_jsonl(out / "groups.jsonl"),
                   series=series, window=window,
                   generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"))

    def flagged(self) -> list[dict]:
        order = {s: i for i, s in enumerate(stuck.FLAGGED)}
        rows = [f for f in self.findings if f["status"] in order]
        for f in rows:
            f["source"] = f.get("source") or "kafka"  # findings written before the column: Kafka groups
            points = self.series.get((f["cluster"], f["source"], f["group"], f["topic"], f["partition"]), [])
            f["chart"] = lag_chart(points)
            f["behind"] = behind(f)
            f["expires_in"] = humanize(f.get("expires_in_seconds")) if f["status"] == "STOPPED" else None
            since = f.get("stalled_since") or f.get("stopped_since")
            f["since"] = readable_time(since)
            f["confidence"] = f.get("confidence")
            f["since_ago"] = _ago(since, f.get("window_end"))
        return sorted(rows, key=lambda f: (order[f["status"]], f["cluster"], f["source"], f["group"], f["topic"],
                                           f["partition"]))

    def not_judged(self) -> list[dict]:
        """The groups none of whose partitions could be judged (status INSUFFICIENT_DATA), each with
        about when its history is enough (`judged_from`, readable): never counted as OK."""
        rows = [dict(g, judged_from=readable_time(g.get("judged_from"))) for g in self.groups
                if g.get("status") == "INSUFFICIENT_DATA"]
        return sorted(rows, key=lambda g: (g["cluster"], g.get("source") or "kafka", g["group"]))

    def clusters(self) -> list[dict]:
        per: dict[str, Counter] = defaultdict(Counter)
        storms: dict[str, list] = defaultdict(list)
        for f in self.findings:
            per[f["cluster"]][f["status"]] += 1
        for g in self.groups:
            if g.get("rebalance_storm"):
                storms[g["cluster"]].append(g["group"])
        blind = {b["cluster"]: b["line"] for b in self.blind}
        for c in blind:
            per.setdefault(c, Counter())
        return [{"cluster": c, "partitions": sum(n.values()), "counts": dict(sorted(n.items())),
                 "storms": storms.get(c, []), "blind": blind.get(c)} for c, n in sorted(per.items())]

    def alerts(self) -> list[str]:
        """One line per partition in an alerting state and per rebalance storm."""
        lines = []
        for f in self.flagged():
            if f["status"] in stuck.ALERTING:
                extra = f" (offset expires in {f['expires_in']})" if f["status"] == "STOPPED" else ""
                if f.get("since"):
                    extra += f" since {f['since']}" + (f" ({f['confidence']} confidence)" if f.get("confidence") else "")
                what = "group" if f["source"] == "kafka" else f"{f['source']} group" if f["source"] == "zookeeper" \
                    else f"{f['source']} spout"
                lines.append(f"{f['status']} {f['cluster']} {what} {f['group']!r} {f['topic']}-{f['partition']} "
                             f"lag {f['behind']}{extra}: {f['reason']}")
        for g in self.groups:
            if g.get("rebalance_storm"):
                lines.append(f"REBALANCE_STORM {g['cluster']} group {g['group']!r}: {storm_what(g)}. "
                             f"Fix: {storm_fix(g)}")
        return lines

    def render(self, out_dir: str | Path) -> tuple[Path, Path]:
        """report.html and report.md in `out_dir` (a local folder, or a data root's object store URI)."""
        out = as_path(out_dir)
        flagged, unjudged = self.flagged(), self.not_judged()
        ctx = {"report": self, "flagged": flagged[:REPORT_LIMIT], "total_flagged": len(flagged), "storm_what": storm_what,
               "not_judged": unjudged[:REPORT_LIMIT], "total_not_judged": len(unjudged),
               "storm_fix": storm_fix,
               "more": max(0, len(flagged) - REPORT_LIMIT), "clusters": self.clusters(),
               "storms": [g for g in self.groups if g.get("rebalance_storm")]}
        html_path, md_path = out / "report.html", out / "report.md"
        html_path.write_text(render("stuck_report.html.j2", **ctx), encoding="utf-8")
        md_path.write_text(render("stuck_report.md.j2", **ctx), encoding="utf-8")
        return html_path, md_path


#: the job's outputs a stuck run publishes to reports/stuck/latest (the fleet page reads them there)
OUTPUTS = ("findings.jsonl", "groups.jsonl", "series.jsonl")


def _group_key(row: dict) -> tuple:
    return row.get("cluster"), row.get("source") or "kafka", row.get("group")


def carry_judged(latest: dict[str, list[dict]], run: dict[str, list[dict]]) -> tuple[dict[str, list[dict]], list]:
    """What reports/stuck/latest shows after `run` ({OUTPUTS name: rows}), given what it shows now:
    a run with too little history does not replace a judged one. A group the run could not judge
    (INSUFFICIENT_DATA: "not judged yet") whose latest verdict flagged it (STALLED, STOPPED, ...)
    keeps that verdict, its findings and series, marked `carried_as_of` (the judgement's time) and
    with the run's `judged_from`; every other group is the run's. Returns (the rows to publish, the
    keys of the groups carried)."""
    old_groups = {_group_key(g): g for g in latest.get("groups.jsonl", [])}
    old_as_of = {}
    for f in latest.get("findings.jsonl", []):
        old_as_of.setdefault(_group_key(f), f.get("carried_as_of") or f.get("window_end"))
    carried = []
    groups = []
    for g in run.get("groups.jsonl", []):
        old = old_groups.get(_group_key(g))
        if g.get("status") == "INSUFFICIENT_DATA" and old is not None and old.get("status") in stuck.FLAGGED:
            key = _group_key(g)
            carried.append(key)
            groups.append(dict(old, carried_as_of=old.get("carried_as_of") or old_as_of.get(key),
                               judged_from=g.get("judged_from")))
        else:
            groups.append(g)
    if not carried:
        return dict(run), []
    keep = set(carried)
    out = {"groups.jsonl": groups}
    for name in ("findings.jsonl", "series.jsonl"):
        rows = [r for r in run.get(name, []) if _group_key(r) not in keep]
        for r in latest.get(name, []):
            if _group_key(r) in keep:
                rows.append(dict(r, carried_as_of=r.get("carried_as_of") or old_as_of.get(_group_key(r)))
                            if name == "findings.jsonl" else r)
        out[name] = rows
    return out, carried
