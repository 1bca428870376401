"""Corrupt and hostile log entries: every length, count and varint of a record batch or a 0.9-era
message is bounded, every entry's CRC is checked (CRC32C of a batch, CRC32 of a message) before a
record of it is decoded, and a corrupt entry is counted and named by every reader (the segment
dump, the per-record Fetch path, the column-wise one), never decoded, never a hang or a huge
allocation."""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
import tracemalloc
import zlib

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl.cli import main
from fleetctl.incident import dump_line
from fleetkit.clients import log_format, offsets_columnar, wire_logs
from fleetkit.clients.log_format import FormatError
from fleetkit.clients.offsets_codec import DecodeError, decode, encode_offset_key, encode_offset_value_v1
from fleetkit.collection.offsets_topic import BatchFeeder, RecordsResult, _Taker
from fleetkit.core.datasets import SCHEMAS
from tests.helpers import zigzag

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
KEY = encode_offset_key("g", "t", 0)
VALUE = encode_offset_value_v1(5, "", 1, 2)




def record(key: bytes | None, value: bytes | None, delta: int = 0, klen: int | None = None,
           vlen: int | None = None, length: int | None = None) -> bytes:
    """One record of a batch; klen / vlen / length override the lengths written (the bytes stay)."""
    r = b"\x00" + zigzag(0) + zigzag(delta)
    r += zigzag(-1 if key is None else len(key) if klen is None else klen) + (key or b"")
    r += zigzag(-1 if value is None else len(value) if vlen is None else vlen) + (value or b"")
    r += zigzag(0)
    return zigzag(len(r) if length is None else length) + r


def batch(base: int, records: bytes, count: int, crc: int | None = None, last_delta: int | None = None,
          attrs: int = 0) -> bytes:
    """A magic 2 batch around raw record bytes, its CRC32C right unless `crc` is given."""
    rest = struct.pack(">hiqqqhii", attrs, count - 1 if last_delta is None else last_delta, 0, 0, -1, 0, 0,
                       count if count < 2**31 else count - 2**32) + records
    head = struct.pack(">ibI", 0, 2, crc32c(rest) if crc is None else crc)
    return struct.pack(">qi", base, len(head) + len(rest)) + head + rest


def good(base: int = 0, n: int = 2) -> bytes:
    return batch(base, b"".join(record(KEY, VALUE, i) for i in range(n)), n)


def message(offset: int, key: bytes | None, value: bytes | None, magic: int = 0, codec: int = 0,
            klen: int | None = None, vlen: int | None = None, crc: int | None = None) -> bytes:
    """One LegacyRecord (magic 0/1), its CRC32 right unless `crc` is given."""
    def b(x, n):
        return struct.pack(">i", -1 if x is None else len(x) if n is None else n) + (x or b"")
    body = bytes([magic, codec]) + (struct.pack(">q", 1_000) if magic == 1 else b"") + b(key, klen) + b(value, vlen)
    body = struct.pack(">I", zlib.crc32(body) if crc is None else crc) + body
    return struct.pack(">qi", offset, len(body)) + body


def feed(data: bytes, columnar: bool) -> tuple[RecordsResult, int]:
    """(result, rows taken) of one Fetch answer through a reader's BatchFeeder."""
    res = RecordsResult(rows=[], positions={})
    tables: list = []
    taker = _Taker("c", NOW, res, None, 10**9, table_sink=tables.append if columnar else None)
    feeder = BatchFeeder(taker, {0: 0}, {0: 100})
    feeder.feed(0, data)
    feeder.finish({0: 0}, {})
    if columnar:
        taker.flush()
        return res, sum(t.num_rows for t in tables)
    return res, len(res.rows)


def assert_corrupt_everywhere(entry: bytes, match: str, offset: int = 2) -> None:
    """`entry` after a good batch (offsets 0-1) and before another (offsets 10-11): the per-entry
    reader raises; the Fetch paths count it, take the batch before it and nothing after it; a
    segment dump names it and reads the batch after it."""
    with pytest.raises(FormatError, match=match):
        list(log_format.entry_records(entry))
    data = good(0) + entry + good(10)
    stats, recs = wire_logs.BatchStats(), []
    assert wire_logs.parse_batches(data, stats, recs, []) == 2
    assert [o for o, *_ in recs] == [0, 1]
    assert [(c.position, c.offset) for c in stats.corrupt_batches] == [(len(good(0)), offset)]
    # the column-wise reader takes nothing of it: a CRC mismatch leaves it the whole answer, a
    # malformed batch with a right CRC the batch (the per-record path then reads the whole answer)
    d = offsets_columnar.decode(data, "c", 0, NOW, 0, 100, SCHEMAS["offsets_topic_records"])
    assert d is None or entry in d.slow_batches
    if "CRC" in match:
        assert d is None
    for columnar in (False, True):
        res, rows = feed(data, columnar)
        assert rows == 2 and [(p, o) for p, o, _ in res.corrupt_batches] == [(0, offset)]
        assert res.positions == {0: 2} and "corrupt record batch at offset" in res.problems[0]
    report = log_format.SegmentReport()
    got = list(log_format.read_segment(io.BytesIO(data), "seg", report))
    assert [r.offset for r in got] == [0, 1, 10, 11]
    assert [(c.position, c.offset) for c in report.corrupt] == [(len(good(0)), offset)]
    with pytest.raises(FormatError, match="seg at byte"):
        list(log_format.read_segment(io.BytesIO(data), "seg"))


# -- lengths and counts -------------------------------------------------------------------------------
@pytest.mark.timeout(10)
def test_a_negative_record_length_is_rejected():
    """A length of -3 moved the position backwards: the same bytes read again as more records."""
    recs = record(KEY, VALUE, 0, length=-3) + record(KEY, VALUE, 1)
    assert_corrupt_everywhere(batch(2, recs, 2), "length -3")


@pytest.mark.timeout(10)
def test_a_record_count_of_2_31_neither_loops_nor_allocates():
    """A count of 2**31 - 1 over a record whose length steps back kept appending records until
    memory ran out; the count is now bounded by what the batch's bytes can hold."""
    recs = record(KEY, VALUE, 0, length=-1)
    tracemalloc.start()
    try:
        assert_corrupt_everywhere(batch(2, recs, 2**31 - 1), "record count 2147483647 is impossible")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 1024 * 1024


def test_a_negative_record_count_is_not_zero_records():
    """A count of -2**31 (2**31 read as an int32) read as no records at all, silently."""
    assert_corrupt_everywhere(batch(2, record(KEY, VALUE), 2**31), "record count -2147483648")


def test_a_value_length_of_minus_7_is_not_a_tombstone():
    recs = record(KEY, VALUE, 0) + record(KEY, VALUE, 1, vlen=-7)
    assert_corrupt_everywhere(batch(2, recs, 2), "value length -7")


def test_a_key_running_past_its_record_is_rejected():
    recs = record(KEY, VALUE, 0, klen=len(KEY) + 200)
    assert_corrupt_everywhere(batch(2, recs, 1), "key of")


def test_bytes_after_the_announced_records_are_rejected():
    recs = record(KEY, VALUE, 0) + record(KEY, VALUE, 1)
    assert_corrupt_everywhere(batch(2, recs, 1), "after its 1 record")


def test_a_varint_longer_than_kafka_writes_is_rejected():
    recs = b"\x80" * 11 + record(KEY, VALUE)
    assert_corrupt_everywhere(batch(2, recs, 1), "longer than 5 bytes")


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("klen, vlen, match", [(None, -7, "value length -7"), (-2, None, "key length -2"),
                                               (None, 400, "runs past the end"), (None, len(VALUE) - 3, "after its value")])
def test_message_lengths_are_bounded(magic, klen, vlen, match):
    entry = message(2, KEY, VALUE, magic, klen=klen, vlen=vlen)
    with pytest.raises(FormatError, match=match):
        list(log_format.entry_records(entry))
    stats, recs = wire_logs.BatchStats(), []
    data = message(0, KEY, VALUE, magic) + entry + message(3, KEY, VALUE, magic)
    assert wire_logs.parse_batches(data, stats, recs, []) == 1
    assert [o for o, *_ in recs] == [0] and [c.offset for c in stats.corrupt_batches] == [2]
    for columnar in (False, True):
        res, rows = feed(data, columnar)
        assert rows == 1 and [o for _, o, _ in res.corrupt_batches] == [2]


@pytest.mark.timeout(10)
def test_a_negative_snappy_block_length_does_not_loop():
    data = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", -4)
    with pytest.raises(FormatError, match="snappy"):
        log_format.decompress(2, data)


# -- CRCs --------------------------------------------------------------------------------------------
def test_a_batch_with_a_bad_crc_is_corrupt_not_decoded():
    entry = bytearray(good(2))
    entry[-1] ^= 0x01  # the last byte of the last record's header count
    assert_corrupt_everywhere(bytes(entry), "CRC32C mismatch")
    assert_corrupt_everywhere(batch(2, b"".join(record(KEY, VALUE, i) for i in range(2)), 2, crc=0),
                              "CRC32C mismatch")


def test_the_batch_crc_covers_attributes_to_the_end_not_the_leader_epoch():
    entry = bytearray(good(2))
    struct.pack_into(">i", entry, 12, 77)  # partition leader epoch: set by the broker, outside the CRC
    assert [r.offset for r in log_format.entry_records(bytes(entry))] == [2, 3]
    entry[21] ^= 0x20  # the attributes (control bit): inside
    with pytest.raises(FormatError, match="CRC32C"):
        list(log_format.entry_records(bytes(entry)))


@pytest.mark.parametrize("magic", [0, 1])
def test_a_message_with_a_bad_crc_is_corrupt_not_decoded(magic):
    entry = message(2, KEY, VALUE, magic, crc=0x12345678)
    with pytest.raises(FormatError, match="CRC32 mismatch"):
        list(log_format.entry_records(entry))
    flipped = bytearray(message(2, KEY, VALUE, magic))
    flipped[-3] ^= 0x40  # a byte of the value
    data = message(0, KEY, VALUE, magic) + bytes(flipped) + message(3, KEY, VALUE, magic)
    stats, recs = wire_logs.BatchStats(), []
    assert wire_logs.parse_batches(data, stats, recs, []) == 1
    assert "CRC32 mismatch" in stats.corrupt_batches[0].reason and [o for o, *_ in recs] == [0]
    assert offsets_columnar.decode(data, "c", 0, NOW, 0, 100, SCHEMAS["offsets_topic_records"]) is None
    for columnar in (False, True):
        res, rows = feed(data, columnar)
        assert rows == 1 and "CRC32 mismatch" in res.corrupt_batches[0][2]
    report = log_format.SegmentReport()
    assert [r.offset for r in log_format.read_segment(io.BytesIO(data), "seg", report)] == [0, 3]
    assert [c.offset for c in report.corrupt] == [2]


def test_an_inner_message_with_a_bad_crc_spoils_its_wrapper():
    import gzip

    inner = message(0, KEY, VALUE, 1) + message(1, KEY, VALUE, 1, crc=7)
    wrapper = message(5, None, gzip.compress(inner), 1, codec=1)
    with pytest.raises(FormatError, match="inner messages: .*CRC32 mismatch"):
        list(log_format.entry_records(wrapper))


# -- unknown record types ---------------------------------------------------------------------------
UNKNOWN_KEY = struct.pack(">h", 99) + b"\x00\x01g"


def test_an_unknown_key_version_is_marked_in_decode_and_the_dump():
    d = decode(UNKNOWN_KEY, b"\x00\x00xyz")
    assert d["kind"] == "unknown" and d["key_version"] == 99
    line = json.loads(dump_line(4, UNKNOWN_KEY, b"\x00\x00xyz", "seg offset 4"))
    assert line["unknown"] is True and line["key"] == {"key_version": 99, "kind": "unknown"}
    assert line["value_hex"] == "000078797a"


def test_cli_decode_marks_an_unknown_key_version(capsys):
    assert main(["offsets", "decode", "--key", UNKNOWN_KEY.hex(), "--value", "0000"]) == 0
    io_ = capsys.readouterr()
    out = json.loads(io_.out)
    assert out["unknown"] is True and out["key_version"] == 99 and out["key_hex"] == UNKNOWN_KEY.hex()
    assert "key version 99" in io_.err and "does not know" in io_.err


# -- fleetctl offsets dump --segment -------------------------------------------------------------
def test_cli_dump_of_a_segment_with_a_corrupt_batch_names_it_and_exits_3(tmp_path, capsys):
    """A bad CRC and an impossible record count printed "0 records", exit 0."""
    corrupt = bytearray(batch(2, record(KEY, VALUE), 2**31))
    corrupt[-2] ^= 0xFF
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(good(0) + bytes(corrupt) + good(10))
    assert main(["offsets", "dump", "--segment", str(seg)]) == 3
    io_ = capsys.readouterr()
    lines = [json.loads(x) for x in io_.out.splitlines()]
    assert [x["offset"] for x in lines] == [0, 1, 2, 10, 11]
    assert lines[2]["position"] == len(good(0)) and "CRC32C mismatch" in lines[2]["corrupt"]
    assert "key" not in lines[2]
    assert f"at byte {len(good(0))} (offset 2)" in io_.err and "1 corrupt entry" in io_.err
    seg.write_bytes(good(0) + good(10))
    assert main(["offsets", "dump", "--segment", str(seg)]) == 0
    seg.write_bytes(struct.pack(">qi", 0, 3) + b"abc")  # not a segment
    assert main(["offsets", "dump", "--segment", str(seg)]) == 2


def test_a_dump_piped_into_head_ends_quietly_with_0(tmp_path):
    """`fleetctl offsets dump ... | head -1`: the reader closing the pipe is not a failure (it was a
    BrokenPipeError traceback, exit 1)."""
    import subprocess
    import sys

    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b"".join(good(i * 10) for i in range(3000)))  # more than a pipe's buffer
    cmd = [sys.executable, "-c", "import sys; from fleetctl.cli import console_main; sys.exit(console_main())",
           "offsets", "dump", "--segment", str(seg)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert json.loads(p.stdout.readline())["offset"] == 0
    p.stdout.close()  # what head does after its line
    err = p.stderr.read().decode()
    assert p.wait(60) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_a_huge_entry_size_at_the_end_of_a_segment_reads_nothing_past_the_file():
    data = good(0) + struct.pack(">qi", 2, 2**31 - 1) + b"\x00" * 60
    report = log_format.SegmentReport()
    tracemalloc.start()
    try:
        got = [r.offset for r in log_format.read_segment(io.BytesIO(data), "seg", report)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == [0, 1] and report.truncated_tail == 72 and peak < 20 * 1024 * 1024


# -- properties ---------------------------------------------------------------------------------------
VALID = good(0, 3)
VALID_MESSAGES = {m: message(0, KEY, VALUE, m) for m in (0, 1)}


@settings(max_examples=400, deadline=None)
@given(st.integers(17, len(VALID) - 1), st.integers(1, 255))
def test_any_byte_changed_inside_a_batch_crc_is_detected(at, flip):
    """From the CRC itself (byte 17) to the end: every one-byte change is a FormatError."""
    entry = bytearray(VALID)
    entry[at] ^= flip
    with pytest.raises(FormatError):
        list(log_format.entry_records(bytes(entry)))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([0, 1]), st.data())
def test_any_byte_changed_inside_a_message_crc_is_detected(magic, data):
    base = VALID_MESSAGES[magic]
    entry = bytearray(base)
    entry[data.draw(st.integers(12, len(base) - 1))] ^= data.draw(st.integers(1, 255))
    with pytest.raises(FormatError):
        list(log_format.entry_records(bytes(entry)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(VALID) + 19), st.integers(0, 255)), min_size=1, max_size=8),
       st.integers(0, len(VALID) + 20))
@pytest.mark.timeout(120)
def test_random_mutations_decode_identically_or_raise_the_decoders_error(changes, cut):
    """Bytes changed, cut off or added anywhere: the entry decodes as before (changes outside the
    CRC: base offset, leader epoch) or raises FormatError; the readers never raise anything else."""
    entry = bytearray(VALID + bytes(20))
    for at, v in changes:
        entry[at] = v
    entry = bytes(entry[:cut])
    want = [(r.key, r.value) for r in log_format.entry_records(VALID)]
    try:
        got = list(log_format.entry_records(entry))
    except FormatError:
        pass
    else:
        assert [(r.key, r.value) for r in got] == want
        assert entry[17:] == VALID[17:]
    try:
        wire_logs.parse_batches(entry, wire_logs.BatchStats(), [], [])
    except FormatError:
        pass
    offsets_columnar.decode(entry, "c", 0, NOW, 0, 100, SCHEMAS["offsets_topic_records"])
    try:
        list(log_format.read_segment(io.BytesIO(entry), "seg", log_format.SegmentReport()))
    except FormatError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.one_of(st.none(), st.binary(max_size=200)))
def test_any_key_and_value_decode_or_raise_decode_error(key, value):
    try:
        decode(key, value)
    except DecodeError:
        pass


def test_a_dump_shows_a_progress_bar_on_a_terminal_only(tmp_path):
    """stderr a terminal: a progress bar (the segment's name, bytes read of its size) while stdout
    stays the JSON lines; stderr a pipe: no bar, the summary line only."""
    import subprocess
    import sys

    from tests.helpers import on_a_terminal

    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b"".join(good(i * 10) for i in range(20000)))
    cmd = [sys.executable, "-c", "import sys; from fleetctl.cli import console_main; sys.exit(console_main())",
           "offsets", "dump", "--segment", str(seg)]
    rc, out, shown = on_a_terminal(cmd, 60)
    assert rc == 0
    lines = out.splitlines()
    assert len(lines) >= 20000 and all(json.loads(line)["offset"] >= 0 for line in lines)  # whole JSON lines
    assert seg.name.encode() in shown and b"bytes" in shown  # the bar, drawn on the terminal
    piped = subprocess.run(cmd, capture_output=True, timeout=60)
    assert piped.returncode == 0 and piped.stdout.decode().splitlines() == lines
    assert piped.stderr.decode().strip().splitlines() == [
        line for line in piped.stderr.decode().strip().splitlines() if "records in" in line]  # the summary only
    assert b"bytes" not in piped.stderr
