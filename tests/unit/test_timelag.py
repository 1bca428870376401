"""Time lag from the log end history (fleetkit.stuck.timelag): numbered cases and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetkit.core.durations import short_duration
from fleetkit.stuck.timelag import TimeLag, estimate

# a producer at 10 records/s, a snapshot every 10 s: log end 0, 100, 200, ... at t = 0, 10, 20, ...
STEADY = [(t, 10 * t) for t in range(0, 101, 10)]

# (number, name, committed, history, as_of, record_ts, kind, seconds, error, why)
CASES = [
    (1, "steady rate, inside the history", 250, STEADY, 100, None, "interpolated", 74.9, 5.1,
     "Record 250 was appended between t=20 (log end 200) and t=30 (300): about 25.1 s, so 74.9 s behind."),
    (2, "caught up", 1000, STEADY, 100, None, "exact", 0.0, 0.0, "Nothing waits: 0 s, whatever the history."),
    (3, "older than the history", 50, [(t, e) for t, e in STEADY if t >= 10], 100, None, "bounded", 90.0, None,
     "Record 50 existed before the first point (t=10, log end 100): at least 90 s, never an extrapolation."),
    (4, "no history", 5, [], 100, None, "unknown", None, None, "No log end known: unknown, not NaN or 0."),
    (5, "no committed offset", None, STEADY, 100, None, "unknown", None, None, "Nothing committed: unknown."),
    (6, "a pause in production (quiet topic: kafka-lag-exporter #111 gave NaN)",
     100, [(0, 0), (10, 100), (20, 101), (300, 101)], 300, None, "interpolated", 280.0, 10.0,
     "Record 100, the only one appended in (10, 20], has waited 280-290 s: a number with its bound, not NaN."),
    (7, "a ramp: 1 record/s, then 100/s", 450, [(0, 0), (10, 10), (20, 110), (30, 1110)], 30, None,
     "interpolated", 6.59, 6.59, "Record 450 is the 341st of 1,000 appended in (20, 30]: about 23.4 s, 6.6 s behind."),
    (8, "a burst between two snapshots", 5000, [(0, 0), (10, 10), (20, 10010), (30, 10020)], 30, None,
     "interpolated", 15.0, 5.0, "The burst of 10,000 in (10, 20]: the middle of it, +- 5 s."),
    (9, "record timestamp inside the bracket", 250, STEADY, 100, 27.0, "exact", 73.0, 1.0,
     "CreateTime 27 s lies in (20, 30]: read as the append time."),
    (10, "a replayed record with an old CreateTime (kafka-lag-exporter #175, #496: tens of hours)",
     250, STEADY, 100, 27.0 - 86400, "interpolated", 74.9, 5.1,
     "A timestamp a day before its bracket is not believed: the bracket bounds the estimate."),
    (11, "a producer clock ahead", 250, STEADY, 100, 500.0, "interpolated", 74.9, 5.1,
     "A timestamp after as_of would give a negative lag: not believed."),
    (12, "log end decreased (topic recreated)", 15, [(0, 500), (10, 900), (20, 10), (30, 30)], 30, None,
     "interpolated", 7.0, 7.0, "Only the history since the recreation counts: record 15 came in (20, 30]."),
    (13, "unsorted points and null log ends", 250, list(reversed(STEADY)) + [(55, None)], 100, None,
     "interpolated", 74.9, 5.1, "Order and gaps in the input change nothing."),
    (14, "points after as_of are ignored", 250, STEADY + [(200, 99999)], 100, None, "interpolated", 74.9, 5.1,
     "A replay with --as-of sees only the past."),
]


@pytest.mark.parametrize("number, name, committed, history, as_of, record_ts, kind, seconds, error, why", CASES,
                         ids=[f"{c[0]:02d}-{c[1][:30]}" for c in CASES])
def test_time_lag_cases(number, name, committed, history, as_of, record_ts, kind, seconds, error, why):
    got = estimate(committed, history, as_of, record_ts)
    assert got.kind == kind, f"case {number} ({name}): {why}: {got}"
    if seconds is None:
        assert got.seconds is None
    else:
        assert got.seconds == pytest.approx(seconds, abs=0.01), f"case {number}: {why}: {got}"
    if error is None:
        assert got.error_seconds is None
    else:
        assert got.error_seconds == pytest.approx(error, abs=0.01), f"case {number}: {why}: {got}"


def test_describe_and_durations():
    assert TimeLag(0.0, "exact", 0.0).describe() == "caught up"
    assert TimeLag(420.0, "interpolated", 5.0).describe() == "about 7 min behind"
    assert TimeLag(7500.0, "bounded").describe() == "at least 2h 5m behind"
    assert TimeLag(None, "unknown").describe() == "time behind unknown"
    assert TimeLag(75.0, "exact", 1.0).describe() == "1m 15s behind"
    assert [short_duration(s) for s in (0, 59.6, 61, 600, 3725, 90000)] == ["0s", "1 min", "1m 1s", "10 min", "1h 2m",
                                                                        "1d 1h"]


@st.composite
def histories(draw):
    """A monotone log end history, the true append time of every record, and a committed offset."""
    n = draw(st.integers(2, 12))
    gaps = draw(st.lists(st.floats(0.5, 120, allow_nan=False), min_size=n - 1, max_size=n - 1))
    adds = draw(st.lists(st.integers(0, 500), min_size=n - 1, max_size=n - 1))
    times, ends = [0.0], [draw(st.integers(0, 1000))]
    truth: dict[int, float] = {}
    for g, a in zip(gaps, adds):
        t0, t1 = times[-1], times[-1] + g
        # the a records of this interval arrive at arbitrary (sorted) times in (t0, t1]
        fr = sorted(draw(st.lists(st.floats(0.0, 1.0, exclude_min=True, allow_nan=False), min_size=a, max_size=a)))
        for k, f in enumerate(fr):
            truth[ends[-1] + k] = t0 + f * g
        times.append(t1)
        ends.append(ends[-1] + a)
    committed = draw(st.integers(max(0, ends[0] - 50), ends[-1] + 5))
    as_of = times[-1] + draw(st.floats(0, 60, allow_nan=False))
    return list(zip(times, ends)), truth, committed, as_of


@settings(max_examples=400, deadline=None)
@given(histories())
def test_estimates_hold_the_truth(data):
    history, truth, committed, as_of = data
    got = estimate(committed, history, as_of)
    assert got.kind in ("exact", "interpolated", "bounded")
    assert got.seconds is not None and got.seconds >= 0 and not math.isnan(got.seconds)
    if committed >= history[-1][1]:
        assert (got.kind, got.seconds) == ("exact", 0.0)
    elif committed < history[0][1]:
        # appended before the first point: the bound is below the truth (which is before t=0)
        assert got.kind == "bounded" and got.seconds <= as_of - history[0][0] + 1e-9
    else:
        true_lag = as_of - truth[committed]
        assert got.kind == "interpolated"
        assert abs(got.seconds - true_lag) <= got.error_seconds + 1e-6


@settings(max_examples=200, deadline=None)
@given(histories(), st.floats(-1e6, 1e6, allow_nan=False))
def test_a_record_timestamp_never_leaves_the_bracket(data, ts):
    history, truth, committed, as_of = data
    plain, with_ts = estimate(committed, history, as_of), estimate(committed, history, as_of, ts)
    assert with_ts.seconds is not None and with_ts.seconds >= 0
    if plain.kind == "interpolated":
        # whatever the producer's clock says, the estimate stays within the history's bracket
        assert abs(with_ts.seconds - plain.seconds) <= plain.error_seconds + 1.0 + 1e-6
