"""Stuck-partition rules: the one definition, used by the Spark job and the pure tests.

A partition's window (as_of - window <= observed_at <= as_of) is reduced to a few facts
(`Features`); `judge` applies the rules to them in order, first match wins:

 0 NO_COMMIT          no row in the window has a committed offset
 1 OUT_OF_RANGE       latest committed < latest log start (records deleted unread) or > log end
 2 OK                 latest lag is 0
 3 REWOUND            the committed offset decreased between two consecutive snapshots
 4 STALLED / STOPPED / FROZEN, early: the offset has not moved, with lag > 0, for longer than this
                      partition's own rhythm allows (`frozen_long_enough`), seen by >= 2 snapshots
 5 INSUFFICIENT_DATA  fewer than 2 snapshots, or they span less than half the window, and no lag
                      trend (rule 8) is established: the trend carries its own history requirement
 6 STALLED            offset never moved in the window, lag > 0, a live member is assigned (a
                      poison record)
 7 STOPPED            offset never moved, lag > 0, no live member assigned (0.9: Dead, not Empty)
                      (a Storm spout: its topology is assigned to a registered supervisor, or not,
                      in Storm's own znodes)
   FROZEN             offset never moved, lag > 0, and nothing says whether a member is alive (a
                      Storm spout whose topology Storm's state in that ZooKeeper does not show,
                      or not readably): running-but-stuck and stopped cannot be told apart
 8 LAGGING            the lag trend over the trailing trend window (below): >= 4 snapshots, one in
                      each third of it, spanning the trend window (at most half the window); the
                      offset advanced; the least-squares slope of lag is positive and rises by at
                      least ratio x the records produced meanwhile; the lag's floor (each third's
                      minimum) rose from third to third by at least ratio x a third of them and by
                      more than the largest dip between two snapshots
 9 INSUFFICIENT_DATA  the offset never moved and lag > 0, but work has not waited at it for the
                      threshold yet ("not judged yet, frozen for N s"): never "keeping pace"
10 OK                 keeping pace, even with non-zero lag

Early detection (rule 4) does not wait for the window. A partition's rhythm is the typical time
between changes of its committed offset: from `__consumer_offsets` commit times when the
collection knows them (`commit_interval_seconds`; re-commits of an unchanged offset do not count,
librdkafka's auto-commit skips them), else from the snapshots themselves. The offset is frozen
too long when work has waited (lag > 0 at the same offset) for at least
max(snapshot interval, 2 x rhythm): a consumer committing every few seconds is judged one or two
snapshots after it stops moving, a consumer committing once a minute after two minutes, and one
that commits only when records arrive (lag 0 in between) only once records wait at it. Work waits
since the commit of the offset when its commit time is known and lag was not seen at 0 since,
otherwise since the first snapshot of the trailing run with lag > 0 (the conservative end; also
when no snapshot before the run saw another offset, as for a consumer just restarted).

The lag trend (rule 8) looks back from the last snapshot over max(6 snapshot intervals,
3 x (rhythm + snapshot interval)), the whole window while either is unknown: each third then
holds a snapshot taken after a commit, the lag's low point. A consumer that commits in steps dips at
each commit, so "lag never decreased" misses it; one that keeps pace comes back down to its floor,
one that falls behind does not; a burst of records lifts the floor once, not third after third. At
a 10 s snapshot interval a consumer committing every few seconds is judged on its last 60 s: a
consumer slowed to half the production rate is LAGGING 50-60 s after it slowed (tests/stuck_cases.py,
cases 40-44).

Each verdict says since when (`since`: when the partition stopped making progress) and how
sure it is (`confidence`):
  high    observed directly (a rewind, an offset out of range), or frozen across the whole window
          or for at least twice the threshold
  medium  frozen past the threshold, with the partition's rhythm and the commit time of its
          offset read from __consumer_offsets; a LAGGING trend
  low     frozen past the threshold, rhythm estimated from the snapshots alone (ZooKeeper and
          Storm stores, or a commit log not read yet)

"snapshots" are the window's rows that have a committed offset. Lag is log end offset minus
committed offset (never a client's fetcher lag). Each rule is a small named predicate, in the
manner of Burrow's evaluator; the rule table in the tests is the correctness proof.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from fleetkit.core.durations import parse_duration  # noqa: F401  (the jobs read durations through the rules)
from fleetkit.core.kafka_names import CONSUMER_PROTOCOL_ASSIGNOR
from fleetkit.core.kafka_names import REBALANCING_STATES as REBALANCING

STATUSES = ("NO_COMMIT", "OUT_OF_RANGE", "OK", "INSUFFICIENT_DATA", "REWOUND", "STALLED", "STOPPED", "FROZEN",
            "LAGGING")
#: offsets_snapshots sources whose store registers no members: a row of one says whether its
#: consumer is alive only when `assigned` is set (a Storm spout: from its topology's znodes in
#: Storm's ZooKeeper, fleetkit.collection.storm_state; null when Storm's state did not say)
NO_LIVENESS_SOURCES = ("storm",)
#: a group's status is the first of these its partitions have: one judged partition (OK or worse)
#: outranks the partitions not judged yet, so a group is INSUFFICIENT_DATA ("not judged yet") only
#: when none of its partitions could be judged, and NO_COMMIT only when none has a commit
GROUP_ORDER = ("OUT_OF_RANGE", "REWOUND", "STOPPED", "FROZEN", "STALLED", "LAGGING", "OK", "INSUFFICIENT_DATA",
               "NO_COMMIT")
#: the verdicts worse than OK (what the reports list and chart)
FLAGGED = GROUP_ORDER[:GROUP_ORDER.index("OK")]
#: the order groups are shown in, worst first: what could not be judged comes before OK (never green)
SHOWN_ORDER = FLAGGED + ("INSUFFICIENT_DATA", "NO_COMMIT", "OK")
#: how a status reads where a person sees it (the others read as they are)
STATUS_WORDS = {"INSUFFICIENT_DATA": "not judged yet", "NO_COMMIT": "no commit"}
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
    liveness_known: bool = True       # False: nothing said whether a member is alive (source storm, assigned null)
    # -- early detection (times are epoch seconds) --
    as_of: float | None = None        # when the judgement is made
    snapshot_interval: float | None = None  # median seconds between consecutive snapshots in the window
    change_gap: float | None = None   # median seconds between offset changes the window's snapshots saw
    commit_interval: float | None = None    # median seconds between offset changes per __consumer_offsets
    committed_at: float | None = None       # commit time of the latest committed offset, when known
    streak: int = 0                   # trailing in-window snapshots at the latest offset with lag > 0
    streak_start: float | None = None       # the first of them
    before_at: float | None = None    # the snapshot just before the streak (in or before the window)
    before_same: bool | None = None   # it showed the latest offset too (lag 0 or unknown there)
    # -- the lag trend (rule 8) over the trailing `trend_seconds` of the window: its snapshots with a
    # known lag, cut into three equal thirds of their span --
    trend_snapshots: int = 0          # snapshots with a known lag in the trend
    trend_span: float = 0.0           # last - first observed_at of them
    trend_third: int = 0              # snapshots in the emptiest third
    trend_advanced: bool = False      # the committed offset at the last of them > at the first
    trend_produced: int | None = None       # log end growth from the first of them to the last
    trend_slope: float | None = None        # least-squares slope of lag over time (records per second)
    trend_floor_rise: int | None = None     # the smaller rise of the lag's floor (a third's minimum)
                                            # from the first third to the second and the second to the last
    trend_dip: int = 0                # the largest fall of lag between consecutive snapshots of the trend

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


class Verdict(NamedTuple):
    status: str
    reason: str
    since: float | None = None        # epoch seconds: when the partition stopped making progress
    confidence: str | None = None     # high | medium | low (module docstring)
    judged_from: float | None = None  # epoch seconds, INSUFFICIENT_DATA only: about when the history is enough


# -- early detection ------------------------------------------------------------------------------
def rhythm(f: Features) -> tuple[float | None, str | None]:
    """(typical seconds between offset changes, where it comes from: commits | snapshots)."""
    if f.commit_interval is not None:
        return f.commit_interval, "commits"
    if f.change_gap is not None:
        return f.change_gap, "snapshots"
    return None, None


def freeze_threshold(f: Features) -> float | None:
    """How long work may wait at an unmoved offset before the partition counts as frozen."""
    gap, _ = rhythm(f)
    if gap is None or f.snapshot_interval is None:
        return None
    return max(f.snapshot_interval, 2 * gap)


def pending_since(f: Features) -> float | None:
    """Since when work has waited at the latest offset (epoch seconds), or None."""
    if f.streak == 0 or f.streak_start is None:
        return None
    # the commit time counts only when a snapshot before the streak saw another offset: then the
    # offset took its value between the two. With no earlier snapshot, lag may have been 0 (or the
    # consumer down) until the first one: a consumer restarted after a pause commits later.
    c = f.committed_at
    if f.before_at is not None and not f.before_same and c is not None and f.before_at < c <= f.streak_start:
        return c
    return f.streak_start


def frozen_seconds(f: Features) -> float | None:
    since = pending_since(f)
    return None if since is None or f.as_of is None else max(0.0, f.as_of - since)


def _waited_enough(f: Features, threshold: float) -> bool:
    """Work has waited at least `threshold`; when the wait is counted from a snapshot (not from a
    commit time) a quarter of a snapshot interval of slack absorbs the jitter of collection times."""
    waited = frozen_seconds(f)
    if waited is None or f.streak < 2 or (f.latest_lag or 0) <= 0:
        return False
    exact = f.committed_at is not None and pending_since(f) == f.committed_at
    slack = 0.0 if exact or f.snapshot_interval is None else 0.25 * f.snapshot_interval
    return waited + slack >= threshold


def frozen_long_enough(f: Features) -> bool:
    """Rule 4: >= 2 snapshots show the latest offset with lag > 0, and work has waited there for at
    least the partition's threshold."""
    threshold = freeze_threshold(f)
    return threshold is not None and _waited_enough(f, threshold)


def frozen_all_window(f: Features) -> bool:
    """Rules 6-7: the offset never moved in the window, and work has waited at it for at least the
    threshold (twice the snapshot interval when the partition's rhythm is unknown): a consumer
    that commits only when records arrive is not stuck the moment a record lands."""
    return frozen_with_lag(f) and _waited_enough(f, whole_window_threshold(f))


def whole_window_threshold(f: Features) -> float:
    """The wait rules 6-7 ask for: the partition's threshold, or twice the snapshot interval when
    its rhythm is unknown."""
    threshold = freeze_threshold(f)
    return 2 * (f.snapshot_interval or 0.0) if threshold is None else threshold


def frozen_confidence(f: Features, whole_window: bool) -> str:
    threshold, waited = freeze_threshold(f), frozen_seconds(f)
    if whole_window or (threshold is not None and waited is not None and waited >= 2 * threshold):
        return "high"
    _, source = rhythm(f)
    return "medium" if source == "commits" and f.committed_at is not None else "low"


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


#: the lag trend spans at least this many snapshot intervals, and three of the partition's rhythms
#: plus a snapshot interval each (so each third sees a snapshot after a commit: the floor of a
#: consumer that commits in steps), and holds at least TREND_MIN_SNAPSHOTS snapshots, one a third
TREND_SNAPSHOT_INTERVALS = 6
TREND_MIN_SNAPSHOTS = 4


def trend_seconds(snapshot_interval: float | None, rhythm_seconds: float | None) -> float | None:
    """How far back from the last snapshot the lag trend looks (None: the whole window, while the
    snapshot interval or the partition's rhythm is unknown)."""
    if snapshot_interval is None or rhythm_seconds is None:
        return None
    return max(TREND_SNAPSHOT_INTERVALS * snapshot_interval, 3 * (rhythm_seconds + snapshot_interval))


def trend_start(last: float, snapshot_interval: float | None, rhythm_seconds: float | None) -> float | None:
    """The earliest observed_at (epoch seconds) in the lag trend of a partition whose last snapshot
    is at `last` (a quarter snapshot interval of slack for collection jitter); None: no bound."""
    d = trend_seconds(snapshot_interval, rhythm_seconds)
    return None if d is None else last - d - 0.25 * snapshot_interval


def trend_needed(f: Features, window_seconds: float) -> float:
    """The span the lag trend must cover to be judged: its own length, at most half the window."""
    d = trend_seconds(f.snapshot_interval, rhythm(f)[0])
    return window_seconds / 2 if d is None else min(d, window_seconds / 2)


def lagging(f: Features, ratio: float, window_seconds: float) -> bool:
    """Rule 8, the lag trend over the trailing `trend_seconds`: the consumer advanced, the
    least-squares slope of its lag is positive and rises by >= ratio x the records produced over the
    trend, and the lag's floor (the minimum of each third) rose from third to third by >= ratio x
    a third of them. A consumer that commits in steps dips at each commit: one that keeps pace dips
    back to its floor, one that falls behind does not; a burst of records lifts the floor once,
    and a consumer draining it lowers it after. The trend carries its own history requirement
    (trend_needed, with a quarter snapshot interval of slack), not half the window."""
    if f.trend_snapshots < TREND_MIN_SNAPSHOTS or f.trend_third < 1 or not f.trend_advanced:
        return False
    if f.trend_produced is None or f.trend_produced <= 0 or f.trend_slope is None or f.trend_floor_rise is None:
        return False
    if f.trend_span + 0.25 * (f.snapshot_interval or 0.0) < trend_needed(f, window_seconds):
        return False
    produced = f.trend_produced
    return (f.trend_slope > 0 and f.trend_slope * f.trend_span >= ratio * produced
            and f.trend_floor_rise >= max(ratio * produced / 3, f.trend_dip))


def _frozen(f: Features, whole_window: bool, window_seconds: float) -> Verdict:
    lag = f.latest_lag
    waited = frozen_seconds(f)
    how_long = (f"for {waited:.0f}s" if waited is not None and not whole_window
                else f"for {f.span_seconds:.0f}s")
    if not whole_window:
        gap, source = rhythm(f)
        how_long += (f" (it normally moves every {gap:.0f}s per "
                     f"{'its commits' if source == 'commits' else 'the snapshots'}; "
                     f"threshold {freeze_threshold(f):.0f}s)")
    since = pending_since(f)
    if since is None and f.as_of is not None:
        since = f.as_of - f.span_seconds
    conf = frozen_confidence(f, whole_window)
    if not f.liveness_known:
        return Verdict("FROZEN", (
            f"The committed offset stayed at {f.latest_committed} {how_long} with lag {lag}; whether this consumer "
            "runs is unknown (a Storm spout whose topology Storm's state in the store's ZooKeeper does not show, or "
            "shows unreadably: the collection's problems say which), so running-but-stuck (a poison record "
            "replayed) and stopped look alike: check the topology in Storm."), since, conf)
    if f.latest_assigned is True:
        return Verdict("STALLED", (
            f"A live member is assigned but the committed offset stayed at {f.latest_committed} {how_long} with lag "
            f"{lag}: likely stuck on the record at offset {f.latest_committed} (poison record) or hung; run "
            "runbook_stuck_skip."), since, conf)
    return Verdict("STOPPED", (
        f"No live member is assigned and the committed offset stayed at {f.latest_committed} {how_long} with lag "
        f"{lag}: the group's consumers are stopped; start them, or its offsets expire after "
        "offsets.retention.minutes."), since, conf)


def judge(f: Features, window_seconds: float, ratio: float = DEFAULT_LAG_GROWTH_RATIO) -> Verdict:
    """The first rule that matches, with one sentence a person can act on, since when and how sure."""
    if no_commit(f):
        return Verdict("NO_COMMIT", "The group has no committed offset for this partition in the window.")
    lag = f.latest_lag
    if out_of_range(f):
        if f.latest_log_start is not None and f.latest_committed < f.latest_log_start:
            return Verdict("OUT_OF_RANGE", (
                f"Committed offset {f.latest_committed} is below the log start {f.latest_log_start}: retention deleted "
                f"{f.latest_log_start - f.latest_committed} record(s) before the group read them; the consumer "
                "will jump by its auto.offset.reset policy."), None, "high")
        return Verdict("OUT_OF_RANGE", (
            f"Committed offset {f.latest_committed} is above the log end {f.latest_log_end}: the topic was "
            "recreated or truncated; reset the group's offsets."), None, "high")
    if caught_up(f):
        return Verdict("OK", "Caught up (lag 0).")
    if f.snapshots >= 2 and offsets_rewound(f):
        return Verdict("REWOUND", ("The committed offset went backwards in the window: someone reset the group or a "
                                   "consumer committed an old position; check for reprocessing."), None, "high")
    if frozen_long_enough(f):
        return _frozen(f, False, window_seconds)
    trend = lagging(f, ratio, window_seconds)  # rule 8 carries its own history requirement
    if insufficient(f, window_seconds) and not trend:
        return Verdict("INSUFFICIENT_DATA", (
            f"Only {f.snapshots} snapshot(s) spanning {f.span_seconds:.0f}s of a {window_seconds:.0f}s window: "
            "not enough to judge (a consumer committing every few minutes is not stuck)."),
            judged_from=None if f.as_of is None else f.as_of - f.span_seconds + window_seconds / 2)
    if frozen_all_window(f):
        return _frozen(f, True, window_seconds)
    if trend:
        rise = f.trend_slope * f.trend_span
        return Verdict("LAGGING", (
            f"Lag rose by about {rise:.0f} over the last {f.trend_span:.0f}s"
            f"{'' if lag is None else f' (now {lag})'} while "
            f"{f.trend_produced} records arrived ({100 * rise / f.trend_produced:.0f} % of them), and its lowest "
            "point rose too: the consumer processes less than it receives; scale it out or speed it up."),
            None, "medium")
    if frozen_with_lag(f):
        return _not_judged_yet(f)
    return Verdict("OK", f"Keeping pace (lag {lag}).")


def _not_judged_yet(f: Features) -> Verdict:
    """Rule 9: the offset never moved and work waits at it, but not yet for the threshold: never
    "keeping pace" (its lag may be growing), judged STALLED / STOPPED once the threshold is met."""
    waited = frozen_seconds(f)
    waited = f.span_seconds if waited is None else waited
    threshold = whole_window_threshold(f)
    return Verdict("INSUFFICIENT_DATA", (
        f"Not judged yet: the committed offset has stayed at {f.latest_committed} for {waited:.0f}s with lag "
        f"{f.latest_lag}; judged STALLED or STOPPED once work has waited {threshold:.0f}s at it."),
        judged_from=None if f.as_of is None else f.as_of + max(0.0, threshold - waited))


def classify(f: Features, window_seconds: float, ratio: float = DEFAULT_LAG_GROWTH_RATIO) -> tuple[str, str]:
    """(status, reason) of `judge`."""
    v = judge(f, window_seconds, ratio)
    return v.status, v.reason


def group_status(statuses: Iterable[str]) -> str:
    """A group's status from its partitions' (GROUP_ORDER): never OK unless a partition was judged OK."""
    present = set(statuses)
    for s in GROUP_ORDER:
        if s in present:
            return s
    return "INSUFFICIENT_DATA"


def shown_word(status: str | None) -> str:
    """A status as a person reads it: "not judged yet" for INSUFFICIENT_DATA."""
    return STATUS_WORDS.get(status or "", status or "")


def rebalance_storm(states_by_time: dict) -> bool:
    """At least 3 distinct snapshot times, in PreparingRebalance / CompletingRebalance in at least
    half of them."""
    rebalancing = sum(1 for s in states_by_time.values() if s in REBALANCING)
    return storm_verdict(len(states_by_time), rebalancing, 0, 0, None, None).storm


#: a group whose members left and came back this many times within the window is in a storm
STORM_MIN_REJOINS = 2
COOPERATIVE_ASSIGNORS = ("cooperative-sticky",)
STORM_FIXES = {
    "poll_interval": ("members are evicted for exceeding max.poll.interval.ms while they process one poll's "
                      "records: lower max.poll.records (or speed up processing), or raise max.poll.interval.ms "
                      "above the slowest batch"),
    "restart": ("members leave and come back as new members (restarts, crashes, session timeouts): give each "
                "consumer a static group.instance.id (static membership) and a session.timeout.ms longer than a "
                "restart"),
    "session": ("static members still time out before they come back: raise session.timeout.ms above the longest "
                "restart or pause"),
    "rebalancing": ("the group was rebalancing in most snapshots: find the members that keep leaving in the "
                    "consumers' logs"),
    "member_churn": ("members keep leaving the consumer group (KIP-848) and joining again, each time a new group "
                     "epoch and assignment: a member whose processing of one poll's records outlasts "
                     "max.poll.interval.ms leaves and rejoins (lower max.poll.records, speed processing up, or "
                     "raise max.poll.interval.ms above the slowest batch); consumers that restart or crash come "
                     "back as new members (give each a static group.instance.id, and set the broker's "
                     "group.consumer.session.timeout.ms longer than a restart)"),
}


class Storm(NamedTuple):
    storm: bool
    kind: str | None             # poll_interval | restart | session | member_churn (KIP-848) | rebalancing | None
    rebalances: int              # generations the group went through in the window
    rejoins: int                 # members that left and came back in the window
    group_wide_stop: bool | None  # every rebalance revokes every partition (an eager assignor); None: unknown
    fix: str | None


def consumer_protocol(assignor: str | None) -> bool:
    """Whether the rows are a KIP-848 consumer group's (collection.rebalances.consumer_group_counters)."""
    return bool(assignor) and assignor.startswith(CONSUMER_PROTOCOL_ASSIGNOR)


def eager(assignor: str | None) -> bool | None:
    """Whether a classic group's assignor revokes everything on each rebalance (None: not known);
    a KIP-848 group's never does (each member gives up only the partitions that move)."""
    if consumer_protocol(assignor):
        return False
    return None if not assignor else assignor not in COOPERATIVE_ASSIGNORS


def storm_verdict(times: int, rebalancing: int, rebalances: int, rejoins: int, cause: str | None,
                  assignor: str | None) -> Storm:
    """The rebalance-storm verdict of a group from its window's facts: `times` distinct snapshot
    times, `rebalancing` of them in a rebalancing state, `rebalances` generations and `rejoins`
    members that left and came back (from __consumer_offsets' group-metadata records), the cause of
    the latest rejoin and the assignor. A storm: at least STORM_MIN_REJOINS rejoins (seen from two
    snapshots on), or (without records) >= 3 snapshot times with half of them rebalancing.

    A KIP-848 group (assignor `consumer:...`) gives epoch counters instead: `rebalances` is its group
    epoch's growth (one per join, one per departure) and `rejoins` its departures; the members that
    left and came back are the lesser of departures and joins (scaling out or in is none), and at
    least STORM_MIN_REJOINS of them are a storm of kind member_churn."""
    wide = eager(assignor)
    if consumer_protocol(assignor):
        departures = max(0, rejoins)
        rejoins = min(departures, max(0, rebalances - departures))
        if rejoins >= STORM_MIN_REJOINS:
            return Storm(True, "member_churn", rebalances, rejoins, wide, STORM_FIXES["member_churn"])
    if rejoins >= STORM_MIN_REJOINS:
        kind = cause if cause in STORM_FIXES else "restart"
    elif times >= 3 and rebalancing * 2 >= times:
        kind = "rebalancing"
    else:
        return Storm(False, None, rebalances, rejoins, wide, None)
    fix = STORM_FIXES[kind]
    if wide:
        fix += (f"; each rebalance stops the whole group (eager assignor {assignor!r}): use the cooperative-sticky "
                "assignor or the consumer group protocol (KIP-848, group.protocol=consumer on Kafka 4)")
    return Storm(True, kind, rebalances, rejoins, wide, fix)


def storm(snapshots: list[dict]) -> Storm:
    """storm_verdict from one group's window of snapshot rows (observed_at, group_state, generation,
    rejoins, rejoin_cause, assignor), one per partition and time: the Spark job computes the same."""
    by_time: dict = {}
    for r in sorted(snapshots, key=lambda r: r["observed_at"]):
        t = by_time.setdefault(r["observed_at"], {})
        for k in ("group_state", "generation", "rejoins", "rejoin_cause", "assignor"):
            if t.get(k) is None and r.get(k) is not None:
                t[k] = r[k]
    times = list(by_time.values())

    def spread(k):
        vals = [t[k] for t in times if t.get(k) is not None]
        return max(vals) - min(vals) if vals else 0

    last = lambda k: next((t[k] for t in reversed(times) if t.get(k) is not None), None)  # noqa: E731
    rebalancing = sum(1 for t in times if t.get("group_state") in REBALANCING)
    return storm_verdict(len(times), rebalancing, spread("generation"), spread("rejoins"), last("rejoin_cause"),
                         last("assignor"))


# -- the pure reduction (the Spark job computes the same facts column-wise: fleetkit.stuck.columnar) -
def liveness_known(source: str | None, assigned: bool | None = None) -> bool:
    """Whether a row of this offsets_snapshots source (null: kafka) says if a member is alive: always
    for Kafka and the old consumer's store; for a Storm spout when `assigned` is set (Storm's own
    znodes told whether its topology runs)."""
    return (source or "kafka") not in NO_LIVENESS_SOURCES or assigned is not None


def _epoch(t) -> float | None:
    if t is None:
        return None
    if isinstance(t, (int, float)):
        return float(t)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def features(rows: list[dict], as_of: dt.datetime, window: dt.timedelta) -> Features:
    """Reduce one partition's snapshot rows (dicts of offsets_snapshots) to Features. Rows after
    as_of are ignored; rows before the window count only as history (the run the latest offset
    belongs to, the offset before a change)."""
    lo = as_of - window
    hist = sorted((r for r in rows if r["observed_at"] <= as_of and r.get("committed_offset") is not None),
                  key=lambda r: r["observed_at"])
    snaps = [r for r in hist if r["observed_at"] >= lo]
    if not snaps:
        known = all(liveness_known(r.get("source")) for r in rows)
        return Features(0, 0.0, None, None, None, None, None, None, False, False, known, as_of=_epoch(as_of))
    first, last = snaps[0], snaps[-1]
    known = liveness_known(last.get("source"), last.get("assigned"))  # the latest snapshot's word
    committed = [r["committed_offset"] for r in snaps]

    def lag_of(r):
        return None if r.get("log_end_offset") is None else r["log_end_offset"] - r["committed_offset"]

    lags = [lag_of(r) for r in snaps]
    times = [_epoch(r["observed_at"]) for r in snaps]
    # offset changes: in-window snapshots whose predecessor (in or before the window) showed another offset
    changes = [_epoch(b["observed_at"]) for a, b in zip(hist, hist[1:])
               if b["observed_at"] >= lo and a["committed_offset"] != b["committed_offset"]]
    # the trailing streak: in-window snapshots at the latest offset with lag > 0
    v = last["committed_offset"]
    streak = 0
    for r in reversed(hist):
        lag = lag_of(r)
        if r["observed_at"] >= lo and r["committed_offset"] == v and lag is not None and lag > 0:
            streak += 1
        else:
            break
    before = hist[-streak - 1] if len(hist) > streak else None
    snapshot_interval = _median([b - a for a, b in zip(times, times[1:])])
    change_gap = _median([b - a for a, b in zip(changes, changes[1:])])
    commit_interval = last.get("commit_interval_seconds")
    trend = _trend(snaps, times, lags, trend_start(times[-1], snapshot_interval,
                                                   commit_interval if commit_interval is not None else change_gap))
    return Features(
        snapshots=len(snaps),
        span_seconds=(last["observed_at"] - first["observed_at"]).total_seconds(),
        latest_committed=last["committed_offset"], latest_log_start=last.get("log_start_offset"),
        latest_log_end=last.get("log_end_offset"), latest_assigned=last.get("assigned"),
        first_committed=first["committed_offset"], first_log_end=first.get("log_end_offset"),
        rewound=any(b < a for a, b in zip(committed, committed[1:])),
        never_moved=min(committed) == max(committed),
        liveness_known=known,
        as_of=_epoch(as_of),
        snapshot_interval=snapshot_interval,
        change_gap=change_gap,
        commit_interval=commit_interval,
        committed_at=_epoch(last.get("committed_at")),
        streak=streak,
        streak_start=_epoch(hist[-streak]["observed_at"]) if streak else None,
        before_at=_epoch(before["observed_at"]) if before is not None else None,
        before_same=(before["committed_offset"] == v) if before is not None else None,
        **trend,
    )


def _trend(snaps: list[dict], times: list[float], lags: list[int | None], start: float | None) -> dict:
    """The lag trend's facts (Features.trend_*) from a partition's in-window snapshots, their times
    and lags: those with a known lag observed at or after `start` (None: all)."""
    pts = [(t, lag, r["committed_offset"], r["log_end_offset"]) for r, t, lag in zip(snaps, times, lags)
           if lag is not None and (start is None or t >= start)]
    if not pts:
        return {}
    n = len(pts)
    t0, t1 = pts[0][0], pts[-1][0]
    span = t1 - t0
    b1, b2 = t0 + span / 3, t0 + 2 * span / 3
    thirds = ([p[1] for p in pts if p[0] < b1], [p[1] for p in pts if b1 <= p[0] < b2],
              [p[1] for p in pts if not p[0] < b2])
    out = {"trend_snapshots": n, "trend_span": span, "trend_third": min(len(x) for x in thirds),
           "trend_advanced": pts[-1][2] > pts[0][2], "trend_produced": pts[-1][3] - pts[0][3]}
    out["trend_dip"] = max([0] + [a[1] - b[1] for a, b in zip(pts, pts[1:])])
    if all(thirds):
        floors = [min(x) for x in thirds]
        out["trend_floor_rise"] = min(floors[1] - floors[0], floors[2] - floors[1])
    # least squares over time relative to the first point (the columnar job sums in the same order)
    xs = [p[0] - t0 for p in pts]
    mx = sum(xs) / n
    my = sum(float(p[1]) for p in pts) / n
    sxx = sum((x - mx) * (x - mx) for x in xs)
    if sxx > 0:
        out["trend_slope"] = sum((x - mx) * (float(p[1]) - my) for x, p in zip(xs, pts)) / sxx
    return out
