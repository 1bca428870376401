"""How far behind in time a consumer is, estimated from the snapshots' log end history.

Kafka keeps no broker time for the record at a group's committed offset. The snapshots, though,
record the partition's log end offset at known times. The record at offset `committed` (the next
one the group will read) was appended after the last snapshot whose log end was <= committed and
no later than the first snapshot whose log end was > committed. So:

* ``exact``        caught up (lag 0), or the record's own timestamp lies inside that bracket
                   (trusted only there: a replayed or skewed producer clock is not believed)
* ``interpolated`` the append time is interpolated linearly on offsets inside the bracket; the
                   truth is within ``seconds`` +- ``error_seconds`` (the distance to the bracket's
                   farther end)
* ``bounded``      the record is older than the whole history: it was appended before the first
                   snapshot, so the consumer is *at least* ``seconds`` behind (no error bound)
* ``unknown``      no committed offset or no usable history

Never negative, never NaN, never an extrapolation beyond the history. Only the trailing part of
the history where the log end never decreased counts (a topic recreated or truncated starts a new
history). On a quiet topic nothing waits and the lag is 0 s; a consumer on a partition that gets
one record an hour is behind by the hour since that record, with the bracket as its error.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable

from fleetkit.core.durations import short_duration

KINDS = ("exact", "interpolated", "bounded", "unknown")
#: how far a record timestamp may lie outside its bracket and still be read as the append time
CLOCK_SLACK_SECONDS = 1.0


@dataclass(frozen=True)
class TimeLag:
    seconds: float | None
    kind: str
    error_seconds: float | None = None

    def describe(self) -> str:
        """'about 7m behind', 'at least 2h 5m behind', 'caught up', 'unknown'."""
        if self.kind == "unknown" or self.seconds is None:
            return "time behind unknown"
        if self.seconds == 0 and self.kind == "exact":
            return "caught up"
        text = short_duration(self.seconds)
        if self.kind == "bounded":
            return f"at least {text} behind"
        if self.kind == "exact":
            return f"{text} behind"
        return f"about {text} behind"


def _history(points: Iterable[tuple[float, int | None]]) -> list[tuple[float, int]]:
    """Sorted (time, log end) points, None log ends dropped, only the trailing non-decreasing run."""
    pts = sorted((float(t), int(e)) for t, e in points if t is not None and e is not None)
    start = 0
    for i in range(1, len(pts)):
        if pts[i][1] < pts[i - 1][1]:
            start = i
    return pts[start:]


def estimate(committed: int | None, history: Iterable[tuple[float, int | None]], as_of: float,
             record_ts: float | None = None) -> TimeLag:
    """The time lag of a consumer at `committed` at time `as_of` (epoch seconds), from the
    partition's (observed_at epoch seconds, log end offset) history and, when known, the
    timestamp (epoch seconds) of the record at `committed`."""
    return History(history, as_of).estimate(committed, record_ts)


class History:
    """A partition's usable log end history up to `as_of`, prepared once for the estimates of every
    group reading the partition (`estimate` is `History(history, as_of).estimate(...)`)."""

    def __init__(self, history: Iterable[tuple[float, int | None]], as_of: float):
        self.as_of = as_of
        self.points = [p for p in _history(history) if p[0] <= as_of]
        self.ends = [e for _, e in self.points]  # non-decreasing (the trailing run)

    def estimate(self, committed: int | None, record_ts: float | None = None) -> TimeLag:
        pts, as_of = self.points, self.as_of
        if committed is None or not pts:
            return TimeLag(None, "unknown")
        if committed >= pts[-1][1]:
            return TimeLag(0.0, "exact", 0.0)
        if committed < pts[0][1]:
            # appended before the history starts: a lower bound only
            return TimeLag(max(0.0, as_of - pts[0][0]), "bounded")
        # the bracket: the last point with log end <= committed, the next one (log end > committed)
        i = bisect.bisect_right(self.ends, committed) - 1
        (t0, e0), (t1, e1) = pts[i], pts[i + 1]
        if record_ts is not None and t0 - CLOCK_SLACK_SECONDS <= record_ts <= t1 + CLOCK_SLACK_SECONDS:
            appended = min(max(record_ts, t0), t1)
            return TimeLag(max(0.0, as_of - appended), "exact", CLOCK_SLACK_SECONDS)
        # record `committed` is the (committed - e0 + 1)-th of the e1 - e0 appended in (t0, t1]
        frac = (committed - e0 + 1) / (e1 - e0)
        appended = t0 + frac * (t1 - t0)
        seconds = max(0.0, as_of - appended)
        error = max(appended - t0, t1 - appended)
        return TimeLag(seconds, "interpolated", error)


def for_rows(rows: list[dict], as_of_epoch: float) -> TimeLag:
    """The time lag of the latest committed offset in one group's snapshot rows of one partition
    (dicts of offsets_snapshots with observed_at as datetimes)."""
    mine = [r for r in rows if r["observed_at"].timestamp() <= as_of_epoch]
    latest = max((r for r in mine if r.get("committed_offset") is not None), key=lambda r: r["observed_at"],
                 default=None)
    if latest is None:
        return TimeLag(None, "unknown")
    record_ts = latest.get("committed_record_timestamp")
    return estimate(latest["committed_offset"], [(r["observed_at"].timestamp(), r.get("log_end_offset")) for r in mine],
                    as_of_epoch, None if record_ts is None else record_ts.timestamp())
