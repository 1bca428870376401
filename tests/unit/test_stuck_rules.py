"""The stuck-partition rule table (tests/stuck_cases.py) through the pure rules."""

import datetime as dt

import pytest

from fleetkit.stuck import rules as stuck
from tests.stuck_cases import CASES, NEVER_FLAGGED, SINCE, SLOWED, T0, WINDOW, snaps


@pytest.mark.parametrize("number, name, rows, expected, why", CASES, ids=[f"{c[0]:02d}-{c[1][:40]}" for c in CASES])
def test_rule_table(number, name, rows, expected, why):
    as_of = max(r["observed_at"] for r in rows)
    f = stuck.features(rows, as_of, WINDOW)
    status, reason = stuck.classify(f, WINDOW.total_seconds())
    assert status == expected, f"case {number} ({name}): {why}\n{f}\n-> {status}: {reason}"
    assert reason.endswith(".") and len(reason) > 10


@pytest.mark.parametrize("number", sorted(SINCE))
def test_since_and_confidence(number):
    _, name, rows, expected, _ = next(c for c in CASES if c[0] == number)
    f = stuck.features(rows, max(r["observed_at"] for r in rows), WINDOW)
    v = stuck.judge(f, WINDOW.total_seconds())
    since, confidence = SINCE[number]
    assert v.status == expected
    want = None if since is None else (T0 + dt.timedelta(seconds=since)).timestamp()
    assert (v.since, v.confidence) == (want, confidence), f"case {number} ({name}): {v}"


def replayed(number):
    """(seconds after T0, status) of a case judged at each of its snapshot times."""
    rows = next(c for c in CASES if c[0] == number)[2]
    out = []
    for as_of in sorted({r["observed_at"] for r in rows}):
        status = stuck.judge(stuck.features(rows, as_of, WINDOW), WINDOW.total_seconds()).status
        out.append(((as_of - T0).total_seconds(), status))
    return out


@pytest.mark.parametrize("number", sorted(SLOWED))
def test_a_slowed_consumer_is_lagging_soon_after_and_not_flagged_before(number):
    slowed, within = SLOWED[number]
    seen = replayed(number)
    assert not [(t, s) for t, s in seen if t <= slowed and s in stuck.FLAGGED], seen
    first = next((t for t, s in seen if s == "LAGGING"), None)
    assert first is not None and first - slowed <= within, seen
    # once LAGGING, it stays so while the consumer stays slow
    assert all(s == "LAGGING" for t, s in seen if t >= first), seen


@pytest.mark.parametrize("number", NEVER_FLAGGED)
def test_a_consumer_keeping_pace_is_never_flagged(number):
    seen = replayed(number)
    assert not [(t, s) for t, s in seen if s in stuck.FLAGGED], seen


def test_commit_time_inconsistent_with_snapshots_is_not_trusted():
    """A commit time after the first snapshot that already showed the offset (a clock ahead, or a
    re-commit's time) would shorten nothing safely: the wait counts from the snapshot instead."""
    from tests.stuck_cases import timed

    rows = snaps((100, 110), (200, 215), (600, 640, timed(25, 3)), (600, 700, timed(25, 3)), step=10)
    f = stuck.features(rows, max(r["observed_at"] for r in rows), WINDOW)
    assert stuck.pending_since(f) == (T0 + dt.timedelta(seconds=20)).timestamp()
    rows[2]["committed_at"] = rows[3]["committed_at"] = T0 + dt.timedelta(seconds=15)
    f = stuck.features(rows, max(r["observed_at"] for r in rows), WINDOW)
    assert stuck.pending_since(f) == (T0 + dt.timedelta(seconds=15)).timestamp()
    assert stuck.judge(f, WINDOW.total_seconds()).status == "STALLED"


def test_rows_after_as_of_are_ignored():
    rows = snaps((100, 110), (200, 215), (600, 640), (600, 700), (600, 760), (700, 800), step=10)
    f = stuck.features(rows, T0 + dt.timedelta(seconds=40), WINDOW)
    assert (f.latest_committed, f.streak, f.snapshots) == (600, 3, 5)
    assert stuck.judge(f, WINDOW.total_seconds()).status == "STALLED"


def test_lag_growth_ratio_is_a_flag():
    rows = snaps((1000, 1100), (2000, 2110), (3000, 3120), (4000, 4125), step=100)
    f = stuck.features(rows, max(r["observed_at"] for r in rows), WINDOW)
    assert stuck.classify(f, WINDOW.total_seconds(), ratio=0.05)[0] == "OK"
    assert stuck.classify(f, WINDOW.total_seconds(), ratio=0.005)[0] == "LAGGING"


def test_group_status_order_and_storm():
    assert stuck.group_status(["OK", "LAGGING", "STALLED"]) == "STALLED"
    assert stuck.group_status(["STOPPED", "REWOUND"]) == "REWOUND"
    # never OK unless a partition was judged OK: a group nothing could be judged of is "not judged yet"
    assert stuck.group_status(["NO_COMMIT", "INSUFFICIENT_DATA"]) == "INSUFFICIENT_DATA"
    assert stuck.group_status(["OK", "INSUFFICIENT_DATA", "NO_COMMIT"]) == "OK"
    assert stuck.group_status(["NO_COMMIT"]) == "NO_COMMIT"
    assert stuck.group_status([]) == "INSUFFICIENT_DATA"
    assert stuck.shown_word("INSUFFICIENT_DATA") == "not judged yet" and stuck.shown_word("STALLED") == "STALLED"
    assert stuck.group_status(["OUT_OF_RANGE", "REWOUND", "STOPPED"]) == "OUT_OF_RANGE"
    t = [T0 + dt.timedelta(seconds=i) for i in range(4)]
    assert stuck.rebalance_storm({t[0]: "PreparingRebalance", t[1]: "Stable", t[2]: "CompletingRebalance",
                                  t[3]: "Stable"}) is True
    assert stuck.rebalance_storm({t[0]: "PreparingRebalance", t[1]: "Stable", t[2]: "Stable"}) is False
    assert stuck.rebalance_storm({t[0]: "PreparingRebalance", t[1]: "AwaitingSync"}) is False  # < 3 times


def test_parse_duration():
    from fleetkit.core.durations import parse_duration

    assert parse_duration("15m") == dt.timedelta(minutes=15)
    assert parse_duration("90s") == dt.timedelta(seconds=90)
    assert parse_duration("2h") == dt.timedelta(hours=2)
    assert parse_duration("1440m") == dt.timedelta(days=1)
    assert parse_duration(30) == dt.timedelta(seconds=30)
    with pytest.raises(ValueError, match="'soon' is not a duration"):
        parse_duration("soon")
    with pytest.raises(ValueError):
        parse_duration("-5m")


def test_a_frozen_offset_not_yet_judged_says_how_long_and_until_when():
    _, _, rows, _, _ = next(c for c in CASES if c[0] == 39)
    f = stuck.features(rows, max(r["observed_at"] for r in rows), WINDOW)
    status, reason = stuck.classify(f, WINDOW.total_seconds())
    assert status == "INSUFFICIENT_DATA"
    assert reason == ("Not judged yet: the committed offset has stayed at 100 for 450s with lag 200; judged STALLED "
                      "or STOPPED once work has waited 900s at it.")
    # when: 900 - 450 s after the judgement
    as_of = max(r["observed_at"] for r in rows).timestamp()
    assert stuck.judge(f, WINDOW.total_seconds()).judged_from == pytest.approx(as_of + 450)


def test_too_short_a_history_says_from_when_it_can_be_judged():
    rows = snaps((1000, 1100), (1000, 1150), step=60)  # 60 s of a 15 min window: judged once it spans 450 s
    f = stuck.features(rows, max(r["observed_at"] for r in rows), WINDOW)
    v = stuck.judge(f, WINDOW.total_seconds())
    first = min(r["observed_at"] for r in rows).timestamp()
    assert v.status == "INSUFFICIENT_DATA" and v.judged_from == pytest.approx(first + 450)
    assert stuck.judge(f, WINDOW.total_seconds()).since is None


def test_what_the_strict_rule_missed():
    """The reproduction: the half-rate consumers' windows fail the old LAGGING rule's premises. Case 40's
    lag falls between some consecutive snapshots of its window (it dipped at commits before the
    slow-down), the strict rule's `lag never decreased`; case 41's history spans less than half the
    window (rule 5). Both are LAGGING by the trend."""
    for number, strict_fails in ((40, "dips"), (41, "short")):
        rows = next(c for c in CASES if c[0] == number)[2]
        as_of = max(r["observed_at"] for r in rows)
        lags = [r["log_end_offset"] - r["committed_offset"] for r in rows]
        f = stuck.features(rows, as_of, WINDOW)
        if strict_fails == "dips":
            assert any(b < a for a, b in zip(lags, lags[1:]))
        else:
            assert stuck.insufficient(f, WINDOW.total_seconds())
        assert stuck.judge(f, WINDOW.total_seconds()).status == "LAGGING"
