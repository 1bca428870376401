"""Stuck-partition rules: the one definition, used by the Spark job and the pure tests.

A partition's window (as_of - window <= observed_at <= as_of) is reduced to a few facts
(`Features`); `classify` applies the rules to them in order, first match wins:

 0 NO_COMMIT          no row in the window has a committed offset
 1 OUT_OF_RANGE       latest committed < latest log start (records deleted unread) or > log end
 2 OK                 latest lag is 0
 3 INSUFFICIENT_DATA  fewer than 2 snapshots, or they span less than half the window
 4 REWOUND            the committed offset decreased between two consecutive snapshots
 5 STALLED            offset never moved, lag > 0, a live member is assigned (a poison record)
 6 STOPPED            offset never moved, lag > 0, no live member assigned (0.9: Dead, not Empty)
   FROZEN             offset never moved, lag > 0, and the store registers no members at all (a
                      Storm spout): running-but-stuck and stopped cannot be told apart
 7 LAGGING            >= 3 snapshots, offset advanced, lag never decreased, and lag grew by at
                      least ratio x what was produced in the window (log end grew)
 8 OK                 keeping pace, even with non-zero lag

"snapshots" are the window's rows that have a committed offset. Lag is log end offset minus
committed offset (never a client's fetcher lag). Each rule is a small named predicate, in the
manner of Burrow's evaluator; the rule table in the tests is the correctness proof.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Iterable

from fleetkit.core.durations import parse_duration  # noqa: F401  (the jobs read durations through the rules)
from fleetkit.core.kafka_names import REBALANCING_STATES as REBALANCING

STATUSES = ("NO_COMMIT", "OUT_OF_RANGE", "OK", "INSUFFICIENT_DATA", "REWOUND", "STALLED", "STOPPED", "FROZEN",
            "LAGGING")
#: offsets_snapshots sources whose store registers no members (nothing says a consumer is alive)
NO_LIVENESS_SOURCES = ("storm",)
#: group status order, worst first (NO_COMMIT and INSUFFICIENT_DATA do not raise a group's status)
GROUP_ORDER = ("OUT_OF_RANGE", "REWOUND", "STOPPED", "FROZEN", "STALLED", "LAGGING", "OK")
ALERTING = ("STOPPED", "FROZEN", "STALLED", "OUT_OF_RANGE")
DEFAULT_WINDOW = dt.timedelta(minutes=15)
DEFAULT_LAG_GROWTH_RATIO = 0.05
DEFAULT_OFFSETS_RETENTION = dt.timedelta(minutes=1440)


@dataclass(frozen=True)
class Features:
    """What the rules need to know about one partition's window."""

    snapshots: int                    # window rows with a committed offset
    span_seconds: float               # last - first observed_at of those rows
    latest_committed: int | None
    latest_log_start: int | None
    latest_log_end: int | None
    latest_assigned: bool | None
    first_committed: int | None
    first_log_end: int | None
    rewound: bool                     # committed[i] < committed[i-1] somewhere
    never_moved: bool                 # min(committed) == max(committed)
    lag_never_decreased: bool         # lag[i] >= lag[i-1] everywhere
    liveness_known: bool = True       # False: the store registers no members (source storm)

    @property
    def latest_lag(self) -> int | None:
        if self.latest_committed is None or self.latest_log_end is None:
            return None
        return self.latest_log_end - self.latest_committed

    @property
    def first_lag(self) -> int | None:
        if self.first_committed is None or self.first_log_end is None:
            return None
        return self.first_log_end - self.first_committed


# -- the rules: tiny named predicates -----------------------------------------------------------
def no_commit(f: Features) -> bool:
    return f.snapshots == 0


def out_of_range(f: Features) -> bool:
    c = f.latest_committed
    below = f.latest_log_start is not None and c < f.latest_log_start
    above = f.latest_log_end is not None and c > f.latest_log_end
    return below or above


def caught_up(f: Features) -> bool:
    return f.latest_lag == 0


def insufficient(f: Features, window_seconds: float) -> bool:
    return f.snapshots < 2 or f.span_seconds < window_seconds / 2


def offsets_rewound(f: Features) -> bool:
    return f.rewound


def frozen_with_lag(f: Features) -> bool:
    return f.never_moved and (f.latest_lag or 0) > 0


def lagging(f: Features, ratio: float) -> bool:
    if f.snapshots < 3 or f.never_moved or not f.lag_never_decreased:
        return False
    if f.latest_committed is None or f.first_committed is None or f.latest_committed <= f.first_committed:
        return False
    if f.latest_log_end is None or f.first_log_end is None or f.latest_lag is None or f.first_lag is None:
        return False
    produced = f.latest_log_end - f.first_log_end
    return produced > 0 and (f.latest_lag - f.first_lag) >= ratio * produced


def classify(f: Features, window_seconds: float, ratio: float = DEFAULT_LAG_GROWTH_RATIO) -> tuple[str, str]:
    """(status, reason): the first rule that matches, with one sentence a person can act on."""
    if no_commit(f):
        return "NO_COMMIT", "The group has no committed offset for this partition in the window."
    lag = f.latest_lag
    if out_of_range(f):
        if f.latest_log_start is not None and f.latest_committed < f.latest_log_start:
            return "OUT_OF_RANGE", (
                f"Committed offset {f.latest_committed} is below the log start {f.latest_log_start}: retention deleted "
                f"{f.latest_log_start - f.latest_committed} record(s) before the group read them; the consumer "
                "will jump by its auto.offset.reset policy.")
        return "OUT_OF_RANGE", (
            f"Committed offset {f.latest_committed} is above the log end {f.latest_log_end}: the topic was "
            "recreated or truncated; reset the group's offsets.")
    if caught_up(f):
        return "OK", "Caught up (lag 0)."
    if insufficient(f, window_seconds):
        return "INSUFFICIENT_DATA", (
            f"Only {f.snapshots} snapshot(s) spanning {f.span_seconds:.0f}s of a {window_seconds:.0f}s window: "
            "not enough to judge (a consumer committing every few minutes is not stuck).")
    if offsets_rewound(f):
        return "REWOUND", ("The committed offset went backwards in the window: someone reset the group or a "
                           "consumer committed an old position; check for reprocessing.")
    if frozen_with_lag(f):
        if not f.liveness_known:
            return "FROZEN", (
                f"The committed offset stayed at {f.latest_committed} for {f.span_seconds:.0f}s with lag {lag}; "
                "nothing registers this consumer's liveness (a Storm spout), so running-but-stuck (a poison record "
                "replayed) and stopped look alike: check the topology in Storm.")
        if f.latest_assigned is True:
            return "STALLED", (
                f"A live member is assigned but the committed offset stayed at {f.latest_committed} for "
                f"{f.span_seconds:.0f}s with lag {lag}: likely stuck on the record at offset {f.latest_committed} "
                "(poison record) or hung; run runbook_stuck_partition.")
        return "STOPPED", (
            f"No live member is assigned and the committed offset stayed at {f.latest_committed} with lag {lag}: "
            "the group's consumers are stopped; start them, or its offsets expire after offsets.retention.minutes.")
    if lagging(f, ratio):
        return "LAGGING", (
            f"Lag grew from {f.first_lag} to {lag} while the log grew by {f.latest_log_end - f.first_log_end}: "
            "the consumer processes less than it receives; scale it out or speed it up.")
    return "OK", f"Keeping pace (lag {lag})."


def group_status(statuses: Iterable[str]) -> str:
    present = set(statuses)
    for s in GROUP_ORDER:
        if s in present:
            return s
    return "OK"


def rebalance_storm(states_by_time: dict) -> bool:
    """At least 3 distinct snapshot times, in PreparingRebalance / CompletingRebalance in at least
    half of them."""
    if len(states_by_time) < 3:
        return False
    rebalancing = sum(1 for s in states_by_time.values() if s in REBALANCING)
    return rebalancing * 2 >= len(states_by_time)


# -- the pure reduction (the Spark job computes the same facts with window functions) -----------
def liveness_known(source: str | None) -> bool:
    """Whether rows of this offsets_snapshots source can say a member is alive (null: kafka)."""
    return (source or "kafka") not in NO_LIVENESS_SOURCES


def features(rows: list[dict], as_of: dt.datetime, window: dt.timedelta) -> Features:
    """Reduce one partition's snapshot rows (dicts of offsets_snapshots) to Features."""
    lo = as_of - window
    known = all(liveness_known(r.get("source")) for r in rows)
    snaps = sorted((r for r in rows if lo <= r["observed_at"] <= as_of and r.get("committed_offset") is not None),
                   key=lambda r: r["observed_at"])
    if not snaps:
        return Features(0, 0.0, None, None, None, None, None, None, False, False, False, known)
    first, last = snaps[0], snaps[-1]
    committed = [r["committed_offset"] for r in snaps]
    lags = [None if r.get("log_end_offset") is None else r["log_end_offset"] - r["committed_offset"] for r in snaps]
    return Features(
        snapshots=len(snaps),
        span_seconds=(last["observed_at"] - first["observed_at"]).total_seconds(),
        latest_committed=last["committed_offset"], latest_log_start=last.get("log_start_offset"),
        latest_log_end=last.get("log_end_offset"), latest_assigned=last.get("assigned"),
        first_committed=first["committed_offset"], first_log_end=first.get("log_end_offset"),
        rewound=any(b < a for a, b in zip(committed, committed[1:])),
        never_moved=min(committed) == max(committed),
        lag_never_decreased=all(a is not None and b is not None and b >= a for a, b in zip(lags, lags[1:])),
        liveness_known=known,
    )
