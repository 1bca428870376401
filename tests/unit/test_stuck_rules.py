"""The stuck-partition rule table (tests/stuck_cases.py) through the pure rules."""

import datetime as dt

import pytest

from fleetkit.stuck import rules as stuck
from tests.stuck_cases import CASES, T0, WINDOW, snaps


@pytest.mark.parametrize("number, name, rows, expected, why", CASES, ids=[f"{c[0]:02d}-{c[1][:40]}" for c in CASES])
def test_rule_table(number, name, rows, expected, why):
    as_of = max(r["observed_at"] for r in rows)
    f = stuck.features(rows, as_of, WINDOW)
    status, reason = stuck.classify(f, WINDOW.total_seconds())
    assert status == expected, f"case {number} ({name}): {why}\n{f}\n-> {status}: {reason}"
    assert reason.endswith(".") and len(reason) > 10


def test_lag_growth_ratio_is_a_flag():
    rows = snaps((1000, 1100), (2000, 2110), (3000, 3120), (4000, 4125), step=100)
    f = stuck.features(rows, max(r["observed_at"] for r in rows), WINDOW)
    assert stuck.classify(f, WINDOW.total_seconds(), ratio=0.05)[0] == "OK"
    assert stuck.classify(f, WINDOW.total_seconds(), ratio=0.005)[0] == "LAGGING"


def test_group_status_order_and_storm():
    assert stuck.group_status(["OK", "LAGGING", "STALLED"]) == "STALLED"
    assert stuck.group_status(["STOPPED", "REWOUND"]) == "REWOUND"
    assert stuck.group_status(["NO_COMMIT", "INSUFFICIENT_DATA"]) == "OK"
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
