"""Storm's own znodes (storms/<id>: StormBase, assignments/<id>: Assignment), gzipped Thrift
TBinaryProtocol structs, read bounded: the statuses and assigned supervisors come out, and bytes
that are not such a struct (truncated, oversized, nested too deep, claiming more elements than
they hold, not gzip) are refused with a StormStateError instead of a crash or an allocation.
The real znodes of a running LocalCluster are read in tests/ui/test_storm_topology.py."""

from __future__ import annotations

import gzip
import struct

import pytest

from fleetkit.collection import storm_state as s


# -- a TBinaryProtocol writer for the test's structs (field type ids as in Thrift) ---------------------
def _str(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def field(ftype: int, fid: int, payload: bytes) -> bytes:
    return struct.pack(">bh", ftype, fid) + payload


def struct_(*fields: bytes) -> bytes:
    return b"".join(fields) + b"\x00"


def storm_base(status: int, name: bytes = b"clicks") -> bytes:
    executors = struct.pack(">bbi", 11, 8, 2) + _str(b"kafka") + struct.pack(">i", 1) + _str(b"bolt") \
        + struct.pack(">i", 1)
    return struct_(field(11, 1, _str(name)), field(8, 2, struct.pack(">i", status)),
                   field(8, 3, struct.pack(">i", 1)), field(13, 4, executors),
                   field(8, 5, struct.pack(">i", 1700000000)), field(11, 6, _str(b"storm")))


def node_info(node: bytes, port: int) -> bytes:
    return struct_(field(11, 1, _str(node)), field(14, 2, struct.pack(">bi", 10, 1) + struct.pack(">q", port)))


def assignment(nodes: list[tuple[bytes, int]]) -> bytes:
    entries = b"".join(struct.pack(">bi", 10, 2) + struct.pack(">qq", i, i) + node_info(n, p)
                       for i, (n, p) in enumerate(nodes, 1))
    hosts = struct.pack(">bbi", 11, 11, len(nodes)) + b"".join(_str(n) + _str(b"host") for n, _ in nodes)
    return struct_(field(11, 1, _str(b"/tmp/code")), field(13, 2, hosts),
                   field(13, 3, struct.pack(">bbi", 15, 12, len(nodes)) + entries))


@pytest.mark.parametrize("status, word", [(1, "ACTIVE"), (2, "INACTIVE"), (3, "REBALANCING"), (4, "KILLED")])
def test_storm_base_status(status, word):
    assert s.storm_base_status(gzip.compress(storm_base(status))) == word


def test_assigned_nodes_are_the_supervisor_ids_of_executor_node_port():
    data = gzip.compress(assignment([(b"sup-a", 6700), (b"sup-b", 6701), (b"sup-a", 6702)]))
    assert s.assigned_nodes(data) == {"sup-a", "sup-b"}
    assert s.assigned_nodes(gzip.compress(struct_(field(11, 1, _str(b"/tmp/code"))))) == set()


def test_liveness_words_map_to_assigned():
    assert [s.Liveness(w, "").assigned for w in (s.RUNNING, s.NOT_RUNNING, s.UNKNOWN)] == [True, False, None]


def _gz(data: bytes) -> bytes:
    # no timestamp in the header: the parameters (and so the test ids) are the same in every pytest
    # process, which pytest-xdist requires of the two processes' collections
    return gzip.compress(data, mtime=0)


@pytest.mark.parametrize("raw, match", [
    (b"not gzip at all", "not gzip"),
    (_gz(storm_base(1))[:-6], "truncated gzip|not gzip"),
    (_gz(storm_base(1)[:-4]), "truncated|does not fit"),
    (_gz(storm_base(9)), "known status"),
    (_gz(storm_base(1) + b"\x00\x00"), "bytes after the struct"),
    (_gz(struct_(field(8, 2, struct.pack(">i", 1)), field(99, 3, b""))), "unknown Thrift type"),
    # a string and a map claiming far more than the bytes hold: refused before anything is allocated
    (_gz(struct_(field(11, 1, struct.pack(">i", 2 ** 31 - 1)))), "does not fit"),
    (_gz(struct_(field(13, 4, struct.pack(">bbi", 11, 8, 2 ** 30)))), "does not fit"),
    (_gz(struct_(field(15, 4, struct.pack(">bi", 8, -1)))), "does not fit"),
], ids=lambda v: v if isinstance(v, str) else "bytes")
def test_bytes_that_are_not_a_storm_base_are_refused(raw, match):
    with pytest.raises(s.StormStateError, match=match):
        s.storm_base_status(raw)


def test_nesting_is_bounded():
    inner = struct_()
    for _ in range(s.MAX_DEPTH + 2):
        inner = struct_(field(12, 1, inner))
    with pytest.raises(s.StormStateError, match="nested deeper"):
        s.read_struct(inner)


def test_gunzip_is_bounded_before_and_after():
    bomb = gzip.compress(b"\x00" * (s.MAX_STRUCT_BYTES + 10))
    assert len(bomb) < s.MAX_ZNODE_BYTES
    with pytest.raises(s.StormStateError, match="once gunzipped"):
        s.gunzip(bomb)
    with pytest.raises(s.StormStateError, match="more than"):
        s.gunzip(b"\x1f\x8b" + b"\x00" * s.MAX_ZNODE_BYTES)


def test_an_assignment_without_node_names_is_refused():
    bad = struct_(field(13, 3, struct.pack(">bbi", 15, 12, 1) + struct.pack(">bi", 10, 1) + struct.pack(">q", 1)
                        + struct_(field(8, 9, struct.pack(">i", 1)))))
    with pytest.raises(s.StormStateError, match="NodeInfo without a node"):
        s.assigned_nodes(gzip.compress(bad))
