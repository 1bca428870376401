"""The stuck job's per-task facts (`key_features`, numpy) against the plain-Python reference
(fleetkit.stuck.rules.features) on random snapshot histories: several keys per task in any row
order, rows before the window, repeated and rewound offsets, unknown log ends, ties of a key's
offset across the window's start. A pure function over an Arrow table (no Spark session)."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from fleetkit.core.datasets import SCHEMAS
from fleetkit.stuck import rules
from fleetkit.stuck.columnar import (
    FACT_INPUT, GROUP_KEYS, KEYS, TP_KEYS, _Columns, group_facts, group_id, key_features, log_end_points,
    parse_group_id, task_facts, task_output_schema, unpack_points,
)


AS_OF = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
WINDOW = dt.timedelta(minutes=15)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def history(rng: random.Random, key: dict) -> list[dict]:
    rows = []
    t = AS_OF - dt.timedelta(seconds=rng.choice([300, 1200, 3000]))
    offset, end = rng.randrange(0, 50), rng.randrange(50, 100)
    for _ in range(rng.randrange(1, 25)):
        t += dt.timedelta(seconds=rng.choice([15, 30, 30, 60, 61.5, 120]))
        if t > AS_OF:
            break
        move = rng.random()
        if move < 0.4:
            offset += rng.randrange(1, 10)
        elif move < 0.45:
            offset = max(0, offset - rng.randrange(1, 10))  # rewound
        end = max(end, offset) + rng.choice([0, 0, 1, 5])
        rows.append({**key, "observed_at": t, "committed_offset": offset, "log_start_offset": rng.choice([0, None]),
                     "log_end_offset": None if rng.random() < 0.1 else end,
                     "assigned": rng.choice([True, False, None]),
                     "commit_interval_seconds": rng.choice([None, 12.5, 30.0]),
                     "committed_at": rng.choice([None, t - dt.timedelta(seconds=7)]),
                     "committed_record_timestamp": rng.choice([None, t - dt.timedelta(seconds=90)])})
    return rows


def table(rows: list[dict]) -> pa.Table:
    schema = SCHEMAS["offsets_snapshots"]
    cols = {}
    for name in [*KEYS, *FACT_INPUT]:
        typ = schema.field(name).type if name in schema.names else pa.string()
        cols[name] = pa.array([r.get(name) for r in rows], typ)
    return pa.table(cols)


def lo_us() -> int:
    return (AS_OF - WINDOW - EPOCH) // dt.timedelta(microseconds=1)


@pytest.mark.parametrize("seed", range(12))
def test_every_fact_equals_the_reference(seed):
    rng = random.Random(seed)
    keys = [{"cluster": c, "source": s, "group": g, "topic": "t", "partition": p}
            for c in ("a", "b") for s in ("kafka", "zookeeper") for g in ("g1", "g 2 \"q\"") for p in range(3)]
    by_key = {tuple(k.values()): history(rng, k) for k in keys}
    rows = [r for rs in by_key.values() for r in rs]
    rng.shuffle(rows)  # the task gets its rows in any order
    out = key_features(table(rows), lo_us()).to_pylist()
    got = {tuple(r[k] for k in KEYS): r for r in out}
    assert set(got) == {k for k, rs in by_key.items() if rs}
    checked = trends = 0
    for key, rs in by_key.items():
        if not rs:
            continue
        r, f = got[key], rules.features(rs, AS_OF, WINDOW)
        assert r["snapshots"] == f.snapshots
        assert r["unchanged_since"] == max(b["observed_at"] for a, b in zip([None] + rs, rs)
                                           if a is None or a["committed_offset"] != b["committed_offset"])
        if f.snapshots == 0:
            assert r["first_at"] is None and r["last_at"] is None and r["rewound"] is None
            assert r["streak"] == 0 and r["streak_start"] is None
            continue
        checked += 1
        span = (r["last_at"] - r["first_at"]).total_seconds()
        assert (span, r["latest_committed"], r["latest_log_start"], r["latest_log_end"], r["latest_assigned"],
                r["first_committed"], r["first_log_end"], bool(r["rewound"]), r["never_moved"]) == (
            f.span_seconds, f.latest_committed, f.latest_log_start, f.latest_log_end, f.latest_assigned,
            f.first_committed, f.first_log_end, f.rewound, f.never_moved), key
        assert {k: r[k] for k in TREND} == {k: getattr(f, k) for k in TREND}, key
        assert r["trend_slope"] == (None if f.trend_slope is None else pytest.approx(f.trend_slope, rel=1e-9)), key
        trends += f.trend_snapshots >= rules.TREND_MIN_SNAPSHOTS and f.trend_third >= 1
        assert (r["snapshot_interval"], r["change_gap"], r["commit_interval"], r["committed_at"]) == (
            f.snapshot_interval, f.change_gap, f.commit_interval, f.committed_at), key
        assert (r["streak"], r["streak_start"], r["before_at"], r["before_same"]) == (
            f.streak, f.streak_start, f.before_at, f.before_same), key
        last = max((x for x in rs if x["observed_at"] >= AS_OF - WINDOW), key=lambda x: x["observed_at"])
        ts = last["committed_record_timestamp"]
        assert r["record_ts"] == (ts.timestamp() if ts else None)
    assert checked >= 10 and trends >= 1


#: the lag trend's facts but its slope (a float summed in another order: compared approximately)
TREND = ["trend_snapshots", "trend_span", "trend_third", "trend_advanced", "trend_produced", "trend_floor_rise",
         "trend_dip"]


def test_no_rows_is_nothing():
    assert key_features(table([]), lo_us()) is None


def test_row_codes_are_equal_exactly_for_equal_tuples():
    """_Columns.codes: one int64 per row for a tuple of columns (strings, ints, nulls), equal codes
    exactly for equal tuples, also when the product of the columns' cardinalities passes 2**62 (the
    codes are re-densified)."""
    rng = random.Random(3)
    rows = [(rng.choice(["a", "b", None, "ü 'x'"]), rng.choice([0, 1, 2, None]), rng.choice(["t", "u"]))
            for _ in range(500)]
    t = pa.table({"s": pa.array([r[0] for r in rows], pa.string()), "p": pa.array([r[1] for r in rows], pa.int32()),
                  "u": pa.array([r[2] for r in rows], pa.string())})
    codes = _Columns(t).codes(["s", "p", "u"]).tolist()
    for i in range(len(rows)):
        for j in range(i):
            assert (codes[i] == codes[j]) == (rows[i] == rows[j]), (rows[i], rows[j])
    firsts = list(dict.fromkeys(rows))  # dense, numbered in the order of their first row
    assert codes == [firsts.index(r) for r in rows]
    # 6 columns of 2,000 distinct values each: 2000**6 > 2**62
    n = 2000
    wide = pa.table({f"c{i}": pa.array([(k * (i + 7)) % n for k in range(n)] + [0], pa.int64()) for i in range(6)})
    codes = _Columns(wide).codes(wide.column_names).tolist()
    assert len(set(codes[:n])) == n and codes[n] == codes[0]


# -- the groups' facts (rebalance storms) against rules.storm ---------------------------------------
STATES = ["Stable", "Stable", "PreparingRebalance", "CompletingRebalance", "Empty", None]
CAUSES = [None, None, "poll_interval", "restart", "session"]
ASSIGNORS = [None, "range", "cooperative-sticky", "consumer:uniform"]
VOCAB = sorted({w for w in CAUSES + ASSIGNORS if w})


def group_history(rng: random.Random, group: dict) -> list[dict]:
    """One row per partition and time; the rows of one time agree (one DescribeGroups answer)."""
    rows = []
    t = AS_OF - dt.timedelta(seconds=rng.choice([600, 1200, 2400]))
    generation, rejoins = rng.randrange(0, 5), rng.randrange(0, 3)
    parts = rng.randrange(1, 4)
    for _ in range(rng.randrange(1, 20)):
        t += dt.timedelta(seconds=rng.choice([15, 30, 60, 90]))
        if t > AS_OF:
            break
        generation += rng.choice([0, 0, 1, 2])
        rejoins += rng.choice([0, 0, 0, 1])
        state = {"group_state": rng.choice(STATES),
                 "generation": None if rng.random() < 0.15 else generation,
                 "rejoins": None if rng.random() < 0.3 else rejoins,
                 "rejoin_cause": rng.choice(CAUSES), "assignor": rng.choice(ASSIGNORS)}
        for p in range(parts):
            if rng.random() < 0.9:  # a partition can be missing at a time
                rows.append({**group, "topic": "t", "partition": p, "observed_at": t, **state})
    return rows


def group_table(rows: list[dict]) -> pa.Table:
    code = {w: i + 1 for i, w in enumerate(VOCAB)}  # Spark's array_position: 1-based
    return pa.table({
        **{k: pa.array([r[k] for r in rows], pa.string()) for k in GROUP_KEYS},
        "observed_at": pa.array([r["observed_at"] for r in rows], pa.timestamp("us", tz="UTC")),
        "_rebalancing": pa.array([r["group_state"] in rules.REBALANCING for r in rows]),
        "generation": pa.array([r["generation"] for r in rows], pa.int32()),
        "rejoins": pa.array([r["rejoins"] for r in rows], pa.int32()),
        "_cause": pa.array([code.get(r["rejoin_cause"]) for r in rows], pa.int64()),
        "_assignor": pa.array([code.get(r["assignor"]) for r in rows], pa.int64()),
    })


@pytest.mark.parametrize("seed", range(8))
def test_group_facts_give_the_reference_storm_verdict(seed):
    rng = random.Random(seed)
    groups = [{"cluster": c, "source": s, "group": g} for c in ("a", "b") for s in ("kafka", "zookeeper")
              for g in ("g1", "g 2 'q'", "g3")]
    by_group = {tuple(g.values()): group_history(rng, g) for g in groups}
    rows = [r for rs in by_group.values() for r in rs]
    rng.shuffle(rows)
    got = {tuple(r[k] for k in GROUP_KEYS): r for r in group_facts(group_table(rows), lo_us()).to_pylist()}
    lo = AS_OF - WINDOW
    in_window = {g: [r for r in rs if r["observed_at"] >= lo] for g, rs in by_group.items()}
    assert set(got) == {g for g, rs in in_window.items() if rs}
    storms = 0
    for g, rs in in_window.items():
        if not rs:
            continue
        r = got[g]
        times = sorted({x["observed_at"] for x in rs})
        assert r["times"] == len(times), g
        at = {x["observed_at"]: x for x in rs}  # the rows of a time agree
        assert r["rebalancing"] == sum(at[t]["group_state"] in rules.REBALANCING for t in times), g
        cause = VOCAB[r["cause_code"] - 1] if r["cause_code"] is not None else None
        assignor = VOCAB[r["assignor_code"] - 1] if r["assignor_code"] is not None else None
        assert cause == next((at[t]["rejoin_cause"] for t in reversed(times) if at[t]["rejoin_cause"]), None), g
        assert assignor == next((at[t]["assignor"] for t in reversed(times) if at[t]["assignor"]), None), g
        mine = rules.storm_verdict(r["times"], r["rebalancing"], r["rebalances"], r["rejoins"], cause, assignor)
        assert mine == rules.storm(rs), g
        storms += mine.storm
    assert storms >= 1  # the histories include storms


def hi_us() -> int:
    return (AS_OF - EPOCH) // dt.timedelta(microseconds=1)


def task_table(rows: list[dict]) -> pa.Table:
    t = group_table(rows)
    for name in ("topic", "partition", *FACT_INPUT[1:]):
        typ = pa.int32() if name == "partition" else SCHEMAS["offsets_snapshots"].field(name).type
        t = t.append_column(name, pa.array([r[name] for r in rows], typ))
    return t


def test_task_facts_carry_keys_and_groups_apart():
    """One task's output: a row per key (`_row` 0: its facts, or null facts when it has no committed
    row up to as_of), a row per group with rows in the window (`_row` 1) and a row per topic
    partition with its log end points (`_row` 2), each with the other kinds' columns null. Rows after
    as_of count for nothing but their key."""
    rng = random.Random(5)
    rows = []
    for g in ("g1", "g2"):
        for r in group_history(rng, {"cluster": "a", "source": "kafka", "group": g}):
            rows.append({**r, "committed_offset": None if r["partition"] == 0 else 7, "log_start_offset": 0,
                         "log_end_offset": 9 + r["partition"], "assigned": True, "commit_interval_seconds": None,
                         "committed_at": None, "committed_record_timestamp": None})
    late = {"cluster": "a", "source": "kafka", "group": "g1", "topic": "late", "partition": 0,
            "observed_at": AS_OF + dt.timedelta(seconds=30), "group_state": "PreparingRebalance", "generation": 99,
            "rejoins": 9, "rejoin_cause": "session", "assignor": None, "committed_offset": 3, "log_start_offset": 0,
            "log_end_offset": 12, "assigned": True, "commit_interval_seconds": None, "committed_at": None,
            "committed_record_timestamp": None}
    without_late = task_facts(task_table(rows), lo_us(), hi_us()).to_pylist()
    out = task_facts(task_table(rows + [late]), lo_us(), hi_us())
    assert out.schema == task_output_schema()
    keys = [r for r in out.to_pylist() if r["_row"] == 0]
    groups = [r for r in out.to_pylist() if r["_row"] == 1]
    points = [r for r in out.to_pylist() if r["_row"] == 2]
    assert sorted((r["group"], r["topic"], r["partition"]) for r in keys) == sorted(
        {(r["group"], r["topic"], r["partition"]) for r in rows + [late]})
    committed = {(r["group"], r["partition"]) for r in rows if r["committed_offset"] is not None}
    for r in keys:
        assert r["times"] is None and r["points"] is None
        assert (r["snapshots"] is not None) == ((r["group"], r["partition"]) in committed and r["topic"] == "t"), r
    assert sorted(r["group"] for r in groups) == sorted({r["group"] for r in rows if r["observed_at"] >= AS_OF - WINDOW})
    assert all(r["snapshots"] is None and r["partition"] is None and r["times"] >= 1 for r in groups)
    assert sorted((r["topic"], r["partition"], *p) for r in points for p in unpack_points([r["points"]])) == sorted(
        {("t", r["partition"], r["observed_at"].timestamp(), r["log_end_offset"]) for r in rows})
    assert all(r["group"] is None and r["source"] is None and r["snapshots"] is None for r in points)
    # the late row changes no group's facts, no key's and no point
    assert [r for r in out.to_pylist() if r["topic"] != "late"] == without_late


def test_log_end_points_are_the_distinct_points_up_to_as_of():
    """Per topic partition, every (time, log end) once, whichever groups reported it; none without a
    log end or after as_of; the time in epoch seconds as Spark casts a timestamp to double. Packed
    values of several tasks unpack to their union, sorted by time."""
    rng = random.Random(11)
    rows = []
    for g in ("g1", "g2", "g 3 $(x)"):
        for r in group_history(rng, {"cluster": rng.choice(["a", "b"]), "source": "kafka", "group": g}):
            rows.append({**r, "committed_offset": 1, "log_start_offset": 0,
                         "log_end_offset": None if rng.random() < 0.1 else rng.choice([100, 101]) + r["partition"],
                         "assigned": None, "commit_interval_seconds": None, "committed_at": None,
                         "committed_record_timestamp": None})
    dup = dict(rows[0], group="other")  # another group, same partition and time
    after = dict(rows[0], observed_at=AS_OF + dt.timedelta(microseconds=1), log_end_offset=5)
    got = log_end_points(task_table(rows + [dup, after]), hi_us()).to_pylist()
    tps = [tuple(p[k] for k in TP_KEYS) for p in got]
    assert len(tps) == len(set(tps))
    want = {}
    for r in rows:
        if r["log_end_offset"] is not None:
            want.setdefault(tuple(r[k] for k in TP_KEYS), set()).add((r["observed_at"].timestamp(), r["log_end_offset"]))
    assert {tp: unpack_points([p["points"]]) for tp, p in zip(tps, got)} == {tp: sorted(v) for tp, v in want.items()}
    # two tasks' values of one partition: their union, each point once
    half = len(rows) // 2
    a, b = (log_end_points(task_table(part), hi_us()).to_pylist() for part in (rows[:half], rows[half:]))
    tp = tps[0]
    packed = [p["points"] for p in a + b if tuple(p[k] for k in TP_KEYS) == tp] + [b""]
    assert unpack_points(packed) == sorted(want[tp]) and unpack_points([]) == []


@pytest.mark.parametrize("parts", [("c", "kafka", "g"), ("", "", ""), (None, None, None), ("3:x", "-", "1:a2:bc"),
                                   ("grüße 🚀", "zookeeper", "a\"b' $(id)\n"), ("c", None, "-")])
def test_a_group_id_parses_back_to_its_parts(parts):
    assert parse_group_id(group_id(*parts)) == parts


@pytest.mark.parametrize("text", ["", "3:ab", "1:a1:b", "1:a1:b1:cX", "x:a-1:b", "-1:a"])
def test_a_string_that_is_no_group_id_is_refused(text):
    with pytest.raises(ValueError):
        parse_group_id(text)
