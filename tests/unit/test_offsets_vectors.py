"""__consumer_offsets records captured from real 3.9.2 and 4.3.1 brokers (tests/vectors, written
by tests/vectors/capture_offsets_vectors.py), decoded without a broker: the Fetch answers' record
batches as the brokers sent them, control batches (transaction markers) included."""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from fleetkit.clients import wire_logs
from fleetkit.clients.offsets_codec import decode, encode_offset_key, encode_offset_value_v1
from fleetkit.collection.offsets_topic import BatchFeeder, RecordsResult, _Taker
from tests.helpers import zigzag

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def feed_vectors(doc: dict) -> RecordsResult:
    res = RecordsResult(rows=[], positions={})
    starts = {int(p): x["start"] for p, x in doc["partitions"].items()}
    ends = {int(p): x["end"] for p, x in doc["partitions"].items()}
    feeder = BatchFeeder(_Taker(doc["cluster"], NOW, res, None, 10**9), starts, ends)
    for p, x in doc["partitions"].items():
        for answer in x["fetch_answers_base64"]:
            feeder.feed(int(p), base64.b64decode(answer))
    feeder.finish(starts, {})
    return res


#: per captured cluster: group metadata records of the classic group (3.9 writes one at the end
#: of the join and one when the last member leaves; 4.3's coordinator also writes the group
#: when it is created, generation 0: not in this capture, the group existed from an earlier
#: run) and the KIP-848 record kinds of the consumer-protocol group (4.3 only)
GROUP_METADATA = {"lab39test": 2, "lab43test": 2}
KIP848 = {"lab39test": {}, "lab43test": {"consumer_group_metadata": 2, "consumer_group_member_metadata": 2,
                                         "consumer_group_target_assignment_member": 2,
                                         "consumer_group_target_assignment_metadata": 1,
                                         "consumer_group_current_member_assignment": 2}}


@pytest.mark.parametrize("cluster", sorted(GROUP_METADATA))
def test_captured_records_decode(cluster):
    doc = json.loads((VECTORS / f"offsets_records_{cluster}.json").read_text())
    res = feed_vectors(doc)
    exp = doc["expect"]["groups"]
    commits: dict[str, int] = {}
    latest: dict[str, dict] = {}
    for r in res.rows:
        if r["key_version"] in (0, 1):
            commits[r["group"]] = commits.get(r["group"], 0) + 1
            latest.setdefault(r["group"], {})[(r["topic"], r["topic_partition"])] = r["committed_offset"]
    for g, e in exp.items():
        assert commits[g] == e["offset_commits"], g
        assert latest[g] == {(t, q): o for t, q, o in e["latest"]}, g
    # the aborted transaction's two offset commits were read and dropped; both markers counted
    txn = [g for g in exp if g.endswith("-txn")][0]
    assert res.aborted_records == exp[txn]["aborted_records"] == 2
    assert res.markers == {"commit": 1, "abort": 1} and res.control_batches == 2
    assert res.open_transactions == 0 and res.unknown_versions == {} and res.problems == []
    assert sum(1 for r in res.rows if r["key_version"] == 2) == GROUP_METADATA[cluster]
    assert {k: n for k, n in res.kinds.items() if k.startswith("consumer_group")} == KIP848[cluster]
    assert res.other_versions == sum(KIP848[cluster].values())
    # every position ends at the captured end
    assert res.positions == {int(p): x["end"] for p, x in doc["partitions"].items()}


@pytest.mark.parametrize("cluster", sorted(GROUP_METADATA))
def test_raw_records_match_the_batches(cluster):
    """The stored raw keys and values are what the batch parser reads from the stored answers,
    and each decodes."""
    doc = json.loads((VECTORS / f"offsets_records_{cluster}.json").read_text())
    for p, x in doc["partitions"].items():
        recs, ctl = [], []
        for a in x["fetch_answers_base64"]:
            wire_logs.parse_batches(base64.b64decode(a), wire_logs.BatchStats(), recs, ctl)
        got = [{"offset": o, "key": k.hex(), "value": v.hex() if v is not None else None, "producer_id": pid}
               for o, k, v, pid in recs]
        assert got == x["records"]
        assert [{"offset": o, "producer_id": pid, "type": t} for o, pid, t in ctl] == x["control"]
        for r in x["records"]:
            d = decode(bytes.fromhex(r["key"]), bytes.fromhex(r["value"]) if r["value"] else None)
            assert d["kind"] != "unknown"


def test_consumer_protocol_records_decode():
    doc = json.loads((VECTORS / "offsets_records_lab43test.json").read_text())
    decoded = [decode(bytes.fromhex(r["key"]), bytes.fromhex(r["value"]) if r["value"] else None)
               for x in doc["partitions"].values() for r in x["records"]]
    member = [d for d in decoded if d["kind"] == "consumer_group_member_metadata" and not d["tombstone"]][0]
    assert member["client_id"].endswith("-modern-client") and member["client_host"] == "/127.0.0.1"
    assert member["subscribed_topics"] == [doc["expect"]["topic"]] and member["rebalance_timeout"] == 300000
    current = [d for d in decoded if d["kind"] == "consumer_group_current_member_assignment"
               and not d["tombstone"]][0]
    assert current["member_id"] == member["member_id"]
    assert [a["partitions"] for a in current["assignment"]] == [[0, 1, 2]]
    assert current["member_epoch"] > current["previous_member_epoch"]


# -- batches built here: what the lab's brokers did not write ----------------------------------


def batch(base: int, records: list[tuple[bytes | None, bytes | None]], pid: int = -1, control: bool = False) -> bytes:
    body = b""
    for i, (k, v) in enumerate(records):
        r = b"\x00" + zigzag(0) + zigzag(i)
        r += zigzag(-1) if k is None else zigzag(len(k)) + k
        r += zigzag(-1) if v is None else zigzag(len(v)) + v
        r += zigzag(0)
        body += zigzag(len(r)) + r
    attrs = (0x10 if pid >= 0 else 0) | (0x20 if control else 0)
    rest = struct.pack(">hiqqqhii", attrs, len(records) - 1, 0, 0, pid, 0, 0, len(records)) + body
    head = struct.pack(">ibI", 0, 2, crc32c(rest))  # CRC32C from the attributes to the end
    return struct.pack(">qi", base, len(head) + len(rest)) + head + rest


def with_crc(entry) -> bytes:
    """A batch built or patched here, with its CRC32C computed again."""
    entry = bytearray(entry)
    struct.pack_into(">I", entry, 17, crc32c(bytes(entry[21:])))
    return bytes(entry)


def feed(batches: bytes, start: int = 0, end: int = 100) -> RecordsResult:
    res = RecordsResult(rows=[], positions={})
    feeder = BatchFeeder(_Taker("c", NOW, res, None, 10**9), {0: start}, {0: end})
    feeder.feed(0, batches)
    feeder.finish({0: start}, {})
    return res


COMMIT = (encode_offset_key("g", "t", 0), encode_offset_value_v1(5, "", 1, 2))


def test_unknown_record_type_is_counted_with_its_version():
    res = feed(batch(0, [COMMIT, (struct.pack(">h", 99) + b"future", b"v"), (struct.pack(">h", 99) + b"x", None),
                         (struct.pack(">h", 25), b"")]))
    assert res.unknown_versions == {99: 2, 25: 1}
    assert [r["committed_offset"] for r in res.rows] == [5]
    assert res.kinds == {"offset_commit": 1, "unknown": 3}
    assert "key version 99" in res.summary() and res.positions == {0: 4}


def test_open_transaction_stops_the_position_at_its_first_record():
    data = batch(0, [COMMIT]) + batch(1, [COMMIT, COMMIT], pid=7) + batch(3, [COMMIT])
    res = feed(data, end=4)
    assert len(res.rows) == 2 and res.open_transactions == 1 and res.positions == {0: 1}
    commit_marker = batch(4, [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0))], pid=7, control=True)
    res = feed(data + commit_marker, end=5)
    assert len(res.rows) == 4 and res.markers == {"commit": 1} and res.positions == {0: 5}


def test_a_batch_cut_off_at_the_end_of_an_answer_is_read_next_time():
    data = batch(0, [COMMIT]) + batch(1, [COMMIT])
    stats, recs = wire_logs.BatchStats(), []
    assert wire_logs.parse_batches(data[:-3], stats, recs, []) == 1
    assert [o for o, *_ in recs] == [0]


def test_broker_files_are_read_only_where_they_are(tmp_path):
    """Brokers whose log dirs are not on this machine are asked for sizes (DescribeLogDirs)."""
    from fleetkit.collection.offsets_topic import local_files
    from fleetkit.core.fleet import Broker

    (tmp_path / "kafka" / "data").mkdir(parents=True)
    assert local_files(Broker(1, (str(tmp_path / "kafka" / "data"),))) is not None
    assert local_files(Broker(1, (str(tmp_path / "kafka" / "gone"),))) is None
    assert local_files(Broker(1, (str(tmp_path / "kafka" / "data"),), access="ssh", ssh_conn_id="x")) is None


@pytest.mark.parametrize("cluster", sorted(GROUP_METADATA))
def test_the_pipelined_fetch_guesses_the_position_the_parser_gives(cluster):
    """next_offset (entry headers only) lands where parse_batches (CRC checked, decoded) does, on
    every captured answer and on each answer cut short (a batch the next fetch reads again)."""
    doc = json.loads((VECTORS / f"offsets_records_{cluster}.json").read_text())
    answers = [base64.b64decode(a) for x in doc["partitions"].values() for a in x["fetch_answers_base64"]]
    assert answers
    for data in answers:
        for cut in (len(data), len(data) - 3, len(data) // 2, 20, 0):
            part = data[:max(cut, 0)]
            assert wire_logs.next_offset(part) == wire_logs.parse_batches(part, wire_logs.BatchStats(), [], [])


def test_the_guess_on_legacy_message_sets_and_built_batches():
    from tests.unit.test_log_format_bounds import KEY, VALUE, message

    legacy = message(7, KEY, VALUE, 0) + message(8, KEY, VALUE, 0)
    assert wire_logs.next_offset(legacy) == wire_logs.parse_batches(legacy, wire_logs.BatchStats(), [], []) == 9
    built = batch(40, [(b"k", b"v")] * 3) + batch(43, [(b"k", None)])
    assert wire_logs.next_offset(built) == wire_logs.parse_batches(built, wire_logs.BatchStats(), [], []) == 44
