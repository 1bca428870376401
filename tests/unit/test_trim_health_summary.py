"""The trim_health job's per-task summary (fleetkit.trim.stages.summarize, which its Spark tasks
run through jobs_common.arrow_task): distinct records per segment bucket, in numpy.

A pure function over Arrow tables (no Spark session); checked against a plain-Python reference
on random input: copies of a record in several batches, several partitions per task, offsets
below every segment base, tombstones and sizes."""

from __future__ import annotations

import random
import pyarrow as pa

from fleetkit.trim.stages import summarize


def reference(rows, bases):
    seen = {}
    for pid, off, tomb, size in rows:
        seen[(pid, off)] = (tomb, size)  # copies are identical
    out = {}
    for (pid, off), (tomb, size) in seen.items():
        below = [b for b in bases[pid] if b <= off]
        bucket = max(below) if below else None
        n, t, s, m = out.get((pid, bucket), (0, 0, 0, -1))
        out[(pid, bucket)] = (n + 1, t + int(tomb), s + size, max(m, off))
    return out


def run(rows, bases, batch=7):
    batches = [pa.RecordBatch.from_arrays(
        [pa.array([r[0] for r in chunk], pa.int32()), pa.array([r[1] for r in chunk], pa.int64()),
         pa.array([r[2] for r in chunk], pa.bool_()), pa.array([r[3] for r in chunk], pa.int32())],
        names=["_pid", "offset", "tombstone", "size_bytes"])
        for chunk in (rows[i:i + batch] for i in range(0, len(rows), batch))]
    out = {}
    table = pa.Table.from_batches(batches) if batches else pa.table({
        "_pid": pa.array([], pa.int32()), "offset": pa.array([], pa.int64()), "tombstone": pa.array([], pa.bool_()),
        "size_bytes": pa.array([], pa.int32())})
    for b in summarize(table, bases).to_batches():
        for pid, bucket, n, t, s, m in zip(*(b.column(i).to_pylist() for i in range(6))):
            assert (pid, bucket) not in out
            out[(pid, bucket)] = (n, t, s, m)
    return out


def test_random_partitions_with_copies_match_the_reference():
    rnd = random.Random(11)
    for _ in range(50):
        bases = {p: sorted(rnd.sample(range(0, 500), rnd.randint(1, 6))) for p in range(rnd.randint(1, 4))}
        records = {(p, o): (rnd.random() < 0.2, rnd.randint(20, 200))
                   for p in bases for o in rnd.sample(range(0, 600), rnd.randint(0, 80))}
        rows = [(p, o, t, s) for (p, o), (t, s) in records.items()]
        rows += rnd.sample(rows, len(rows) // 3)  # a collector restart read some twice
        rnd.shuffle(rows)
        assert run(rows, bases) == reference(rows, bases)


def test_no_rows_yields_nothing():
    assert run([], {0: [0]}) == {}


def test_offsets_below_every_base_have_a_null_bucket():
    assert run([(0, 5, False, 10), (0, 5, False, 10), (0, 100, True, 30)], {0: [50]}) == {
        (0, None): (1, 0, 10, 5), (0, 50): (1, 1, 30, 100)}


def test_the_rows_of_a_log_replaced_under_the_collection_are_left_out():
    """stages.after_marks (both engines): of a partition whose log was replaced, only the rows
    collected since the mark stay (a row with no collection time goes too); other partitions and
    clusters keep every row."""
    import datetime as dt

    from fleetkit.core.datasets import TS
    from fleetkit.trim.stages import after_marks

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    rows = pa.table({"cluster": ["a", "a", "a", "a", "b", None],
                     "partition": pa.array([1, 1, 1, 2, 1, 1], pa.int32()),
                     "observed_at": pa.array([t0, t0 + dt.timedelta(days=1), None, t0, t0, t0], TS),
                     "n": [1, 2, 3, 4, 5, 6]})
    assert after_marks(rows, [("a", 1, t0 + dt.timedelta(hours=1))])["n"].to_pylist() == [2, 4, 5, 6]
    assert after_marks(rows, []) is rows
