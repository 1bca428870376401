"""Pure parts of the incident commands: connections from AIRFLOW_CONN_ variables, the record
formats and codecs of `offsets dump`, and the verdicts-now reduction of `lag` / `stuck`."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import struct
import zlib

import cramjam
import pytest

from fleetkit.clients import log_format
from fleetkit.clients.offsets_codec import encode_offset_key, encode_offset_value_v1
from fleetkit.core.connections import from_env, kafka_config
from fleetkit.core.errors import FleetConfigError
from fleetkit.stuck import incident, timelag

from fleetctl.incident import dump_line
from fleetctl.output import print_table
from tests.helpers import GIVE_UP, not_waited_out


# -- connections ----------------------------------------------------------------------------------
def test_json_connection_is_read_without_airflow():
    env = {"AIRFLOW_CONN_LAB_KAFKA": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "h:1"}}),
           "AIRFLOW_CONN_ZK": '{"conn_type": "zookeeper", "host": "z", "port": "2181", "extra": "{\\"chroot\\": \\"/k\\"}"}'}
    c = from_env("lab_kafka", env)
    assert kafka_config(c) == {"bootstrap.servers": "h:1"}
    z = from_env("zk", env)
    assert (z.host, z.port, z.extra) == ("z", 2181, {"chroot": "/k"})


def test_uri_connections_and_callbacks_are_left_to_airflow():
    env = {"AIRFLOW_CONN_U": "kafka://?bootstrap.servers=h%3A1",
           "AIRFLOW_CONN_CB": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "h:1",
                                                                          "error_cb": "my.module.cb"}})}
    assert from_env("u", env) is None and from_env("absent", env) is None
    assert kafka_config(from_env("cb", env)) is None


def test_a_broken_json_connection_names_its_variable():
    with pytest.raises(FleetConfigError, match="AIRFLOW_CONN_BAD"):
        from_env("bad", {"AIRFLOW_CONN_BAD": '{"conn_type": "kafka", "extra": {'})
    with pytest.raises(FleetConfigError, match="bootstrap.servers"):
        kafka_config(from_env("k", {"AIRFLOW_CONN_K": '{"conn_type": "kafka"}'}))


# -- codecs ---------------------------------------------------------------------------------------
PAYLOAD = b"kafka " * 3000 + bytes(range(256))


def test_every_codec_decompresses():
    assert log_format.decompress(1, gzip.compress(PAYLOAD)) == PAYLOAD
    assert log_format.decompress(4, bytes(cramjam.zstd.compress(PAYLOAD))) == PAYLOAD
    raw = bytes(cramjam.snappy.compress_raw(PAYLOAD))
    assert log_format.decompress(2, raw) == PAYLOAD
    # snappy-java's framing (what Kafka's Java clients write): magic, version, compat, blocks
    half = len(PAYLOAD) // 2
    blocks = [bytes(cramjam.snappy.compress_raw(PAYLOAD[:half])), bytes(cramjam.snappy.compress_raw(PAYLOAD[half:]))]
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(struct.pack(">i", len(b)) + b for b in blocks)
    assert log_format.decompress(2, xerial) == PAYLOAD


def test_lz4_frames_with_kafka_0_9_header_checksum_are_read():
    frame = bytearray(bytes(cramjam.lz4.compress(PAYLOAD)))
    assert log_format.decompress(3, bytes(frame)) == PAYLOAD
    frame[6] ^= 0xFF  # the header checksum Kafka 0.8/0.9 computed over the wrong bytes (KAFKA-3160)
    assert log_format.decompress(3, bytes(frame)) == PAYLOAD
    with pytest.raises(log_format.FormatError, match="lz4"):
        log_format.decompress(3, b"not a frame at all")
    with pytest.raises(log_format.FormatError, match="gzip"):
        log_format.decompress(1, b"\x1f\x8b broken")


# -- message sets of magic 0/1 ----------------------------------------------------------------------
def message(offset: int, key: bytes | None, value: bytes | None, magic: int = 1, codec: int = 0,
            ts: int = 1_000) -> bytes:
    """One LegacyRecord entry (offset, size, crc, magic, attributes, [timestamp], key, value)."""
    def b(x):
        return struct.pack(">i", -1) if x is None else struct.pack(">i", len(x)) + x
    body = bytes([magic, codec]) + (struct.pack(">q", ts) if magic == 1 else b"") + b(key) + b(value)
    body = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(body)) + body


def test_a_compressed_wrapper_gives_absolute_offsets():
    # magic 1: inner offsets relative (0..2), the wrapper carries the absolute offset of the last
    inner = b"".join(message(i, b"k%d" % i, b"v%d" % i, 1, ts=500 + i) for i in range(3))
    seg = message(4, None, b"plain", 1) + message(7, None, gzip.compress(inner), 1, codec=1)
    # magic 0: inner offsets absolute
    inner0 = b"".join(message(8 + i, b"k", b"x", 0) for i in range(2))
    seg += message(9, None, bytes(cramjam.snappy.compress_raw(inner0)), 0, codec=2)
    got = list(log_format.read_segment(io.BytesIO(seg + b"\x00" * 64)))
    assert [(r.offset, r.key, r.value, r.magic, r.codec) for r in got] == [
        (4, None, b"plain", 1, 0), (5, b"k0", b"v0", 1, 1), (6, b"k1", b"v1", 1, 1), (7, b"k2", b"v2", 1, 1),
        (8, b"k", b"x", 0, 2), (9, b"k", b"x", 0, 2)]
    assert [r.timestamp for r in got[1:4]] == [500, 501, 502]


def test_a_truncated_last_entry_ends_the_segment_and_garbage_is_named():
    seg = message(0, b"k", b"v") + message(1, b"k", b"v")
    assert [r.offset for r in log_format.read_segment(io.BytesIO(seg[:-3]))] == [0]
    with pytest.raises(log_format.FormatError, match="seg.log at byte 0"):
        list(log_format.read_segment(io.BytesIO(struct.pack(">qi", 0, 3) + b"abc"), "seg.log"))


def test_dump_line_splits_key_and_value_and_names_undecodable_records():
    key = encode_offset_key("g 'x' $(y) ü", "t", 2)
    line = json.loads(dump_line(17, key, encode_offset_value_v1(42, "m", 1000, 2000), "seg offset 17"))
    assert line["offset"] == 17 and line["key"]["group"] == "g 'x' $(y) ü" and line["key"]["partition"] == 2
    assert line["value"]["offset"] == 42
    assert json.loads(dump_line(18, key, None, "seg offset 18"))["value"] is None
    bad = json.loads(dump_line(19, b"\x00\x01\x00", b"", "seg offset 19"))
    assert "seg offset 19" in bad["error"] and bad["key_hex"] == "000100"


# -- verdicts now ---------------------------------------------------------------------------------
T0 = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.timezone.utc)


def row(minutes: float, committed: int, end: int, group: str = "g", **kw) -> dict:
    return {"cluster": "c", "group": group, "topic": "t", "partition": 0, "observed_at": T0 + dt.timedelta(minutes=minutes),
            "committed_offset": committed, "log_start_offset": 0, "log_end_offset": end, "assigned": True,
            "group_state": "Stable", **kw}


def test_judge_now_carries_commit_times_and_uses_history():
    history = [row(-12, 10, 50), row(-8, 10, 80), row(-4, 10, 110,
                                                       committed_at=T0 - dt.timedelta(minutes=13),
                                                       commit_interval_seconds=5.0)]
    now = [row(0, 10, 140)]
    judged, storms = incident.judge_now(now, history, T0)
    j = judged[0]
    assert now[0]["committed_at"] == T0 - dt.timedelta(minutes=13)  # carried: the offset did not change
    assert j["verdict"].status == "STALLED" and j["lag"] == 130 and j["snapshots"] == 4
    assert j["time_lag"].kind in ("interpolated", "bounded") and j["time_lag"].seconds >= 12 * 60
    parts, storming = incident.flagged(judged, storms)
    assert parts == judged and storming == []


def test_no_history_is_insufficient_not_ok_and_a_moved_offset_takes_no_stale_commit_time():
    now = [row(0, 20, 30)]
    judged, _ = incident.judge_now(now, [row(-4, 10, 25, committed_at=T0)], T0)
    assert "committed_at" not in now[0]
    assert judged[0]["verdict"].status == "INSUFFICIENT_DATA"
    assert incident.flagged(judged, {})[0] == []


def test_lag_time_text():
    assert incident.lag_time_text(timelag.TimeLag(None, "unknown")) == "-"
    assert incident.lag_time_text(timelag.TimeLag(0, "bounded")) == "-"
    assert incident.lag_time_text(timelag.TimeLag(0, "exact")) == "0s"
    assert incident.lag_time_text(timelag.TimeLag(420, "interpolated", 5)) == "~7m"
    assert incident.lag_time_text(timelag.TimeLag(7500, "bounded")) == ">=2h5m"


def test_table_escapes_hostile_names():
    buf = io.StringIO()
    print_table(["GROUP", "TOPIC"], [["evil\x1b[31m\nname", "t"]], out=buf)
    text = buf.getvalue()
    assert "\x1b" not in text and "\n" not in text.splitlines()[1] and len(text.splitlines()) == 2


def test_a_zookeeper_that_refuses_connections_fails_fast_naming_the_cluster():
    """kazoo's start() waits out its whole timeout after its retries gave up; ours returns when
    they do (an offset store whose ZooKeeper is down must not cost 10 s of every `lag`)."""
    from fleetkit.clients.zookeeper import ZooKeeperCluster
    from fleetkit.core.errors import ClusterUnreachable

    zk = ZooKeeperCluster("far store", "127.0.0.1:9", "/kafka", timeout=GIVE_UP)
    with not_waited_out(), pytest.raises(ClusterUnreachable,
                                         match=r"'far store' \(127.0.0.1:9/kafka\) did not answer"):
        zk.start()


def test_the_host_column_is_printed_as_kafka_consumer_groups_prints_it():
    """HOST: the broker-reported address with Java's leading slash ('/10.0.0.7'), as Kafka's tool
    prints it (the datasets keep the bare address); a ZooKeeper store's row has no broker-reported
    host and is printed as it is."""
    from types import SimpleNamespace

    from fleetkit.core.kafka_names import printed_host

    assert printed_host("10.0.0.7") == "/10.0.0.7" and printed_host("/10.0.0.7") == "/10.0.0.7"
    assert printed_host(None) is None and printed_host("") == "" and printed_host("h", "zookeeper") == "h"
    row = {"group": "g", "topic": "t", "partition": 0, "committed_offset": 1, "log_end_offset": 3, "lag": 2,
           "member_id": "c-1-uuid", "member_host": "10.0.0.7", "member_client_id": "c-1", "source": "kafka",
           "time_lag": timelag.TimeLag(None, "unknown"), "verdict": SimpleNamespace(status="OK")}
    assert incident.lag_cells(row)[6:9] == ["c-1-uuid", "/10.0.0.7", "c-1"]
    assert incident.lag_cells(dict(row, member_host=None))[7] == "-"
