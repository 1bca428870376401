"""The column-wise __consumer_offsets decoder (fleetkit.clients.offsets_columnar) against the
per-record path on the same Fetch answers: the rows of the offsets_topic_records dataset and every
count of the reader's result must be the same. Answers captured from real 3.9.2 and 4.3.1 brokers
(tests/vectors), and batches built here for what those did not write: every offset-commit value
version, tombstones, hostile names, records outside the asked range, compressed, transactional
and control batches, old message sets, bytes that are not UTF-8, malformed records."""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import json
import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from fleetkit.clients import offsets_columnar
from fleetkit.clients.offsets_codec import encode_group_key, encode_offset_key, encode_offset_value_v1
from fleetkit.collection.offsets_topic import BatchFeeder, RecordsResult, _Taker
from fleetkit.core.datasets import SCHEMAS, table_from_rows

from tests.helpers import zigzag
from tests.unit.test_offsets_vectors import batch, with_crc

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SCHEMA = SCHEMAS["offsets_topic_records"]


def read(answers: dict[int, list[bytes]], starts: dict[int, int], ends: dict[int, int], columnar: bool):
    """(result, table of the dataset's rows sorted by partition and offset) of one reader pass."""
    res = RecordsResult(rows=[], positions={})
    tables: list[pa.Table] = []
    taker = _Taker("c", NOW, res, None, 10**9, table_sink=tables.append if columnar else None)
    feeder = BatchFeeder(taker, dict(starts), dict(ends))
    for p, chunks in answers.items():
        for data in chunks:
            feeder.feed(p, data)
    feeder.finish(dict(starts), {})
    if columnar:
        taker.flush()
    else:
        tables.append(table_from_rows("offsets_topic_records", res.rows))
        res.rows = []
    table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    return res, table.take(pc.sort_indices(table, [("partition", "ascending"), ("offset", "ascending")]))


def same(answers, starts, ends) -> tuple[RecordsResult, pa.Table]:
    slow_res, slow = read(answers, starts, ends, columnar=False)
    fast_res, fast = read(answers, starts, ends, columnar=True)
    assert fast.schema == slow.schema == SCHEMA
    assert fast.num_rows == slow.num_rows
    for name in SCHEMA.names:
        assert fast.column(name).to_pylist() == slow.column(name).to_pylist(), name
    for f in ("positions", "problems", "other_versions", "kinds", "unknown_versions", "control_batches",
              "markers", "aborted_records", "open_transactions"):
        assert getattr(fast_res, f) == getattr(slow_res, f), f
    return fast_res, fast


@pytest.mark.parametrize("cluster", ["lab39test", "lab43test"])
def test_captured_answers_give_the_same_rows(cluster):
    doc = json.loads((VECTORS / f"offsets_records_{cluster}.json").read_text())
    answers = {int(p): [base64.b64decode(a) for a in x["fetch_answers_base64"]] for p, x in doc["partitions"].items()}
    starts = {int(p): x["start"] for p, x in doc["partitions"].items()}
    ends = {int(p): x["end"] for p, x in doc["partitions"].items()}
    res, table = same(answers, starts, ends)
    assert table.num_rows >= 10 and res.markers == {"commit": 1, "abort": 1}
    # and most of them were taken column-wise (the real brokers' plain batches)
    taken = 0
    for p, chunks in answers.items():
        for data in chunks:
            d = offsets_columnar.decode(data, "c", p, NOW, starts[p], ends[p], SCHEMA)
            taken += d.table.num_rows if d is not None and d.table is not None else 0
    assert taken >= table.num_rows // 2


def value(version: int, offset: int, meta: str | None, commit_ts: int = 1_700_000_000_000,
          expire_ts: int = 1_800_000_000_000, epoch: int = 7, topic_id: bool = False) -> bytes:
    raw = None if meta is None else meta.encode()
    string = struct.pack(">h", -1) if raw is None else struct.pack(">h", len(raw)) + raw
    if version in (0, 2):
        return struct.pack(">hq", version, offset) + string + struct.pack(">q", commit_ts)
    if version == 1:
        return encode_offset_value_v1(offset, meta or "", commit_ts, expire_ts) if meta is not None else \
            struct.pack(">hq", 1, offset) + string + struct.pack(">qq", commit_ts, expire_ts)
    if version == 3:
        return struct.pack(">hqi", 3, offset, epoch) + string + struct.pack(">q", commit_ts)
    compact = b"\x00" if raw is None else _uvarint(len(raw) + 1) + raw
    tags = b"\x01\x00\x10" + bytes(range(16)) if topic_id else b"\x00"
    return struct.pack(">hqi", 4, offset, epoch) + compact + struct.pack(">q", commit_ts) + tags


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


HOSTILE = ["g", "spaces and 'quotes' \"x\"", "$(rm -rf /); `id`", "a/b\\c", "ünïcødé-组-🚀", ""]


def test_every_value_version_tombstones_and_hostile_names():
    records = []
    for i, group in enumerate(HOSTILE):
        for kv in (0, 1):
            for vv, meta, tid in [(0, "", False), (1, "m", False), (1, None, False), (2, "ü", False),
                                  (3, None, False), (3, "meta data", False), (4, None, False), (4, "x" * 50, True),
                                  (4, "", False)]:
                records.append((encode_offset_key(group, f"topic-{i}.é", kv * 3 + vv, version=kv),
                                value(vv, 10 * i + vv, meta, topic_id=tid)))
            records.append((encode_offset_key(group, "t", 1, version=kv), None))  # a tombstone
    data = b"".join(batch(100 * b, records[b * 20:(b + 1) * 20]) for b in range(len(records) // 20 + 1)
                    if records[b * 20:(b + 1) * 20])
    res, table = same({3: [data]}, {3: 0}, {3: 10_000})
    assert table.num_rows == len(records) and res.problems == []
    assert set(table.column("group").to_pylist()) == set(HOSTILE)
    assert table.column("tombstone").to_pylist().count(True) == 2 * len(HOSTILE)
    d = offsets_columnar.decode(data, "c", 3, NOW, 0, 10_000, SCHEMA)
    assert d.table.num_rows == len(records) and d.slow_records == [] and d.slow_batches == b""


def test_what_is_not_a_plain_offset_commit_goes_the_per_record_way():
    commit = (encode_offset_key("g", "t", 0), value(3, 5, None))
    big_meta = (encode_offset_key("g", "t", 1), value(4, 6, "y" * 200))  # compact length of 2 bytes
    other_tags = (encode_offset_key("g", "t", 2), value(4, 7, None)[:-1] + b"\x01\x05\x01\x00")
    group_tomb = (encode_group_key("g"), None)
    unknown = (struct.pack(">h", 99) + b"future", b"v")
    short_value = (encode_offset_key("g", "t", 3), b"\x00\x01\x00")
    gz = batch(20, [commit, commit])
    body = gzip.compress(gz[61:])
    head = bytearray(gz[:61])
    struct.pack_into(">h", head, 21, 1)  # attributes: gzip
    struct.pack_into(">i", head, 8, 49 + len(body))
    data = (batch(0, [commit, big_meta, other_tags, group_tomb, unknown, short_value, commit])
            + batch(10, [commit, commit], pid=4) + batch(12, [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0))],
                                                         pid=4, control=True)
            + with_crc(bytes(head) + body) + batch(30, [commit]))
    res, table = same({0: [data]}, {0: 0}, {0: 100})
    assert res.markers == {"commit": 1} and res.unknown_versions == {99: 1}
    assert table.column("offset").to_pylist() == [0, 1, 2, 3, 6, 10, 11, 20, 21, 30]
    d = offsets_columnar.decode(data, "c", 0, NOW, 0, 100, SCHEMA)
    assert d.table.column("offset").to_pylist() == [0, 6, 30]
    assert [o for o, _, _ in d.slow_records] == [1, 2, 3, 4, 5]


def test_records_outside_the_asked_range_and_a_batch_cut_off():
    commits = [(encode_offset_key("g", "t", i), value(1, i, "")) for i in range(10)]
    data = batch(0, commits) + batch(10, commits) + batch(20, commits)
    res, table = same({0: [data[:-5]]}, {0: 4}, {0: 15})
    assert table.column("offset").to_pylist() == list(range(4, 15))
    assert offsets_columnar.decode(data[:-5], "c", 0, NOW, 4, 15, SCHEMA).next_offset == 20


def test_bytes_that_are_not_utf8_leave_the_whole_answer_to_the_per_record_path():
    commit = (encode_offset_key("g", "t", 0), value(1, 5, ""))
    key = encode_offset_key("g", "t", 0)
    bad = (key[:4] + b"\xff" + key[5:], value(1, 6, ""))  # the group's one byte is not UTF-8
    data = batch(0, [commit, bad])
    assert offsets_columnar.decode(data, "c", 0, NOW, 0, 10, SCHEMA) is None
    res, _ = same({0: [data]}, {0: 0}, {0: 10})
    assert res.problems  # the per-record path names the record


def message(offset: int, key: bytes | None, val: bytes | None, magic: int = 0, codec: int = 0) -> bytes:
    """One log entry of Kafka 0.8-0.10's format (LegacyRecord)."""
    def b(x):
        return struct.pack(">i", -1) if x is None else struct.pack(">i", len(x)) + x
    body = struct.pack(">bb", magic, codec) + (struct.pack(">q", 1_700_000_000_000) if magic == 1 else b"") + b(key) + b(val)
    body = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(body)) + body


def test_kafka_09_message_sets_and_a_small_last_message():
    """0.9 answers Fetch v0 with message sets (magic 0); a tombstone is shorter than a record
    batch's header and must still be read when it ends the answer."""
    commits = [(encode_offset_key(g, "tópic", i), value(1, 100 + i, "")) for i, g in enumerate(HOSTILE)]
    data = b"".join(message(i, k, v) for i, (k, v) in enumerate(commits))
    data += message(len(commits), encode_offset_key("g", "t", 9), None)  # a tombstone
    inner = message(20, *commits[0]) + message(21, *commits[1])
    data += message(21, None, gzip.compress(inner), codec=1)  # a compressed wrapper (absolute inner offsets)
    data += message(22, *commits[2], magic=1) + message(23, encode_group_key("g"), None)
    data += message(24, encode_offset_key("g", "t", 1), None)
    assert len(message(24, encode_offset_key("g", "t", 1), None)) < 61
    res, table = same({5: [data, data[:-7]]}, {5: 0}, {5: 25})
    assert table.column("offset").to_pylist() == [*range(len(commits) + 1), 20, 21, 22, 23, 24]
    assert res.positions == {5: 25} and res.problems == []
    d = offsets_columnar.decode(data, "c", 5, NOW, 0, 25, SCHEMA)
    assert d.messages == len(commits) + 4 and d.next_offset == 25
    assert [o for o, _, _ in d.slow_records] == [23]  # the group metadata tombstone


def test_a_malformed_batch_is_the_per_record_paths_error():
    """A batch whose CRC matches but whose records do not fit (a writer's bug) is corrupt, as one
    whose CRC does not match: both paths take the batches before it, nothing of it or after it,
    and name it."""
    commit = (encode_offset_key("g", "t", 0), value(1, 5, ""))
    good = batch(0, [commit, commit])
    after = batch(4, [commit])
    broken = bytearray(batch(2, [commit, commit]))
    struct.pack_into(">i", broken, 57, 5)  # five records announced, two there
    garbled = bytearray(batch(2, [commit, commit]))
    garbled[61] = 0x7E  # the first record's length (zigzag 63) runs into the next one
    for bad, why in ((with_crc(broken), "batch at offset 2: record 2 of 5"), (bytes(broken), "CRC32C mismatch"),
                     (with_crc(garbled), "batch at offset 2: record 0 of 2"), (bytes(garbled), "CRC32C mismatch")):
        res, table = same({0: [good + bad + after]}, {0: 0}, {0: 10})
        assert len(res.problems) == 1 and "corrupt record batch at offset 2" in res.problems[0], res.problems
        assert why in res.problems[0]
        assert [(p, o) for p, o, _ in res.corrupt_batches] == [(0, 2)]
        assert table.column("offset").to_pylist() == [0, 1]
        assert res.positions == {0: 2}  # the next run starts at the corrupt batch again


def test_varints_of_every_width():
    import numpy as np

    values = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, 2**31 - 1, -(2**31), 2**62, -(2**63)]
    data = b"".join(zigzag(v) for v in values)
    at, pos = [], 0
    for v in values:
        at.append(pos)
        pos += len(zigzag(v))
    buf = np.frombuffer(data + bytes(16), dtype=np.uint8)
    got, sizes, ok = offsets_columnar._varints(buf, np.array(at))
    assert got.tolist() == values and ok.all()
    assert sizes.tolist() == [len(zigzag(v)) for v in values]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

NAMES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
RECORD = st.tuples(st.sampled_from(["commit", "commit", "commit", "tombstone", "group", "unknown"]),
                   NAMES, NAMES, st.integers(0, 2**31 - 1), st.sampled_from([0, 1, 2, 3, 4]),
                   st.one_of(st.none(), NAMES), st.booleans(), st.integers(-(2**63), 2**63 - 1))


def built(kind, group, topic, part, vv, meta, tid, off):
    if kind == "group":
        return encode_group_key(group), None
    if kind == "unknown":
        return struct.pack(">h", 99) + group.encode(), None
    key = encode_offset_key(group, topic, part, version=part % 2)
    return key, (None if kind == "tombstone" else value(vv, off, meta, topic_id=tid))


@settings(max_examples=150, deadline=None)
@given(st.lists(RECORD, min_size=1, max_size=40), st.integers(1, 7), st.booleans(), st.integers(0, 45),
       st.integers(0, 50))
def test_any_records_give_the_same_rows_both_ways(records, per_batch, legacy, lo, span):
    recs = [built(*r) for r in records]
    if legacy:
        data = b"".join(message(i, k, v) for i, (k, v) in enumerate(recs))
    else:
        data = b"".join(batch(i, recs[i:i + per_batch]) for i in range(0, len(recs), per_batch))
    same({0: [data]}, {0: lo}, {0: lo + span})
