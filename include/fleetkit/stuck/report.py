"""The stuck-partitions report: read the job's output, render HTML and Markdown, list alerts."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from fleetkit.stuck import rules as stuck
from fleetkit.core.datasets import read_jsonl
from fleetkit.core.render import render


REPORT_LIMIT = 500  # partitions listed in a report; findings.jsonl has them all


def sparkline(points: list[dict], width: int = 220, height: int = 40) -> str:
    """An inline SVG of lag over time. Only numbers go into it (no names)."""
    lags = [p.get("lag") for p in points if p.get("lag") is not None]
    if len(lags) < 2:
        return ""
    top = max(max(lags), 1)
    step = width / (len(lags) - 1)
    coords = " ".join(f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}" for i, v in enumerate(lags))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'aria-label="lag from {int(lags[0])} to {int(lags[-1])}">'
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

    @classmethod
    def load(cls, out_dir: str | Path, window: str = "") -> "StuckReport":
        out = Path(out_dir)
        series = {(s["cluster"], s.get("source") or "kafka", s["group"], s["topic"], s["partition"]): s["points"]
                  for s in read_jsonl(out / "series.jsonl")}
        return cls(findings=read_jsonl(out / "findings.jsonl"), groups=read_jsonl(out / "groups.jsonl"),
                   series=series, window=window,
                   generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"))

    def flagged(self) -> list[dict]:
        order = {s: i for i, s in enumerate(stuck.GROUP_ORDER)}
        rows = [f for f in self.findings if f["status"] in order and f["status"] != "OK"]
        for f in rows:
            f["source"] = f.get("source") or "kafka"  # findings written before the column: Kafka groups
            points = self.series.get((f["cluster"], f["source"], f["group"], f["topic"], f["partition"]), [])
            f["chart"] = sparkline(points)
            f["expires_in"] = humanize(f.get("expires_in_seconds")) if f["status"] == "STOPPED" else None
            f["since"] = f.get("stalled_since") or f.get("stopped_since")
            f["confidence"] = f.get("confidence")
            f["since_ago"] = _ago(f["since"], f.get("window_end"))
        return sorted(rows, key=lambda f: (order[f["status"]], f["cluster"], f["source"], f["group"], f["topic"],
                                           f["partition"]))

    def clusters(self) -> list[dict]:
        per: dict[str, Counter] = defaultdict(Counter)
        storms: dict[str, list] = defaultdict(list)
        for f in self.findings:
            per[f["cluster"]][f["status"]] += 1
        for g in self.groups:
            if g.get("rebalance_storm"):
                storms[g["cluster"]].append(g["group"])
        return [{"cluster": c, "partitions": sum(n.values()), "counts": dict(sorted(n.items())),
                 "storms": storms.get(c, [])} for c, n in sorted(per.items())]

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
                             f"lag {f['lag']}{extra}: {f['reason']}")
        for g in self.groups:
            if g.get("rebalance_storm"):
                lines.append(f"REBALANCE_STORM {g['cluster']} group {g['group']!r}: rebalancing in at least half "
                             "of the window's snapshots (slow processing exceeding max.poll.interval.ms?)")
        return lines

    def render(self, out_dir: str | Path) -> tuple[Path, Path]:
        out = Path(out_dir)
        flagged = self.flagged()
        ctx = {"report": self, "flagged": flagged[:REPORT_LIMIT], "total_flagged": len(flagged),
               "more": max(0, len(flagged) - REPORT_LIMIT), "clusters": self.clusters(),
               "storms": [g for g in self.groups if g.get("rebalance_storm")]}
        html_path, md_path = out / "report.html", out / "report.md"
        html_path.write_text(render("stuck_report.html.j2", **ctx), encoding="utf-8")
        md_path.write_text(render("stuck_report.md.j2", **ctx), encoding="utf-8")
        return html_path, md_path
