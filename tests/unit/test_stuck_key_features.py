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
from fleetkit.stuck.columnar import FACT_INPUT, HASH_KEYS, KEYS, key_features


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
    for name in [*KEYS, *HASH_KEYS, *FACT_INPUT]:
        typ = {"_k": pa.int64(), "_k2": pa.int32()}.get(name) or (
            schema.field(name).type if name in schema.names else pa.string())
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
    checked = 0
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
                r["first_committed"], r["first_log_end"], bool(r["rewound"]), r["never_moved"],
                r["lag_never_decreased"] if r["lag_never_decreased"] is not None else True) == (
            f.span_seconds, f.latest_committed, f.latest_log_start, f.latest_log_end, f.latest_assigned,
            f.first_committed, f.first_log_end, f.rewound, f.never_moved, f.lag_never_decreased), key
        assert (r["snapshot_interval"], r["change_gap"], r["commit_interval"], r["committed_at"]) == (
            f.snapshot_interval, f.change_gap, f.commit_interval, f.committed_at), key
        assert (r["streak"], r["streak_start"], r["before_at"], r["before_same"]) == (
            f.streak, f.streak_start, f.before_at, f.before_same), key
        last = max((x for x in rs if x["observed_at"] >= AS_OF - WINDOW), key=lambda x: x["observed_at"])
        ts = last["committed_record_timestamp"]
        assert r["record_ts"] == (ts.timestamp() if ts else None)
    assert checked >= 10


def test_no_rows_is_nothing():
    assert key_features(table([]), lo_us()) is None


def test_keyed_by_two_hashes_the_facts_are_the_same():
    """The job hands the tasks (xxhash64, hash) of the key instead of its strings when they are unique."""
    rng = random.Random(99)
    keys = [{"cluster": "a", "source": "kafka", "group": f"g{i}", "topic": "t", "partition": p}
            for i in range(5) for p in range(4)]
    rows = []
    for n, k in enumerate(keys):
        rows += [{**r, "_k": 10_000 * (n % 3) + 7, "_k2": n} for r in history(rng, k)]
    rng.shuffle(rows)
    hashes = {tuple(r[k] for k in KEYS): (r["_k"], r["_k2"]) for r in rows}
    by_strings = {tuple(r[k] for k in KEYS): r for r in key_features(table(rows), lo_us()).to_pylist()}
    by_hashes = {(r["_k"], r["_k2"]): r for r in key_features(table(rows), lo_us(), HASH_KEYS).to_pylist()}
    assert len(by_hashes) == len(by_strings) == len(hashes)
    facts = [c for c in by_strings[next(iter(by_strings))] if c not in KEYS]
    for key, r in by_strings.items():
        h = by_hashes[hashes[key]]
        assert [r[c] for c in facts] == [h[c] for c in facts]
