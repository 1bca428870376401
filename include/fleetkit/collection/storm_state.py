"""Whether a Storm topology runs, read from what Storm itself keeps in ZooKeeper (Storm 1.x).

A storm-kafka spout's offset znode names the topology instance that wrote it
({"topology":{"id":<storm id>,...}}). Below Storm's root (storm.zookeeper.root, "/storm" by default;
org.apache.storm.cluster.ClusterUtils) Nimbus and the supervisors keep:

* ``storms/<storm id>``: the topology's StormBase (Nimbus' activateStorm; status ACTIVE, INACTIVE,
  REBALANCING or KILLED). Persistent; deleted with ``assignments/<storm id>`` when Nimbus removes a
  killed topology (StormClusterStateImpl.removeStorm).
* ``assignments/<storm id>``: the Assignment (executor_node_port: executor -> NodeInfo{node: the
  supervisor id, port}). Persistent.
* ``supervisors/<supervisor id>``: SupervisorInfo, an *ephemeral* znode (supervisorHeartbeat): it
  vanishes when the supervisor's ZooKeeper session ends, i.e. when its JVM is gone.

Each value is a Thrift struct in TBinaryProtocol, gzipped (storm.meta.serialization.delegate:
GzipThriftSerializationDelegate; structs in storm.thrift). A topology runs when its StormBase is
ACTIVE (or REBALANCING), it has an assignment, and a supervisor it is assigned to is registered;
it does not run when its StormBase is gone, KILLED or INACTIVE (deactivated: the spout neither
emits nor commits), when it has no assignment, or when none of its supervisors is registered (the
JVM died; the persistent znodes stay behind). Anything else (no Storm state below the root, a
znode not readable, bytes that are not the expected struct) is unknown, with the reason.

Everything read is hostile: the znode is bounded before and after gunzip, the Thrift reader bounds
nesting, element counts and lengths by the bytes left, and the storm id is one znode component.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from kazoo.exceptions import KazooException, NoNodeError

from fleetkit.collection.znodes import UnsafeZnodeName, child_path

DEFAULT_ROOT = "/storm"
#: the largest znode read (ZooKeeper's own default jute.maxbuffer is about 1 MB) and the largest
#: gunzipped struct accepted
MAX_ZNODE_BYTES = 1 << 20
MAX_STRUCT_BYTES = 4 << 20
MAX_DEPTH = 12
MAX_ELEMENTS = 200_000

#: storm.thrift's TopologyStatus
STATUS = {1: "ACTIVE", 2: "INACTIVE", 3: "REBALANCING", 4: "KILLED"}
RUNNING, NOT_RUNNING, UNKNOWN = "running", "not_running", "unknown"


class StormStateError(ValueError):
    """Bytes that are not the Storm struct they should be."""


@dataclass(frozen=True)
class Liveness:
    state: str  # running | not_running | unknown
    reason: str

    @property
    def assigned(self) -> bool | None:
        """The offsets_snapshots `assigned` of a spout of this topology (null: unknown)."""
        return {RUNNING: True, NOT_RUNNING: False}.get(self.state)


# -- bounded gunzip and Thrift TBinaryProtocol ---------------------------------------------------------
def gunzip(data: bytes, limit: int = MAX_STRUCT_BYTES) -> bytes:
    if len(data) > MAX_ZNODE_BYTES:
        raise StormStateError(f"{len(data)} bytes, more than the {MAX_ZNODE_BYTES} read")
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise StormStateError(f"not gzip ({e})") from None
    if len(out) > limit or d.unconsumed_tail:
        raise StormStateError(f"more than {limit} bytes once gunzipped")
    if not d.eof:
        raise StormStateError("truncated gzip")
    return out


class _Reader:
    def __init__(self, buf: bytes):
        self.buf, self.pos, self.elements = buf, 0, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise StormStateError(f"truncated at byte {self.pos} (wanted {n} more)")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, n: int, min_size: int) -> int:
        """A container's element count, bounded by the bytes left and the total allowed."""
        self.elements += max(n, 0)
        if n < 0 or n * min_size > len(self.buf) - self.pos or self.elements > MAX_ELEMENTS:
            raise StormStateError(f"container of {n} elements at byte {self.pos} does not fit")
        return n

    def value(self, ttype: int, depth: int):
        if depth > MAX_DEPTH:
            raise StormStateError("nested deeper than a Storm struct is")
        if ttype == 2:
            return self.unpack(">b") != 0
        if ttype == 3:
            return self.unpack(">b")
        if ttype == 4:
            return self.unpack(">d")
        if ttype == 6:
            return self.unpack(">h")
        if ttype == 8:
            return self.unpack(">i")
        if ttype == 10:
            return self.unpack(">q")
        if ttype == 11:
            return self.take(self.count(self.unpack(">i"), 1))
        if ttype == 12:
            return self.struct(depth + 1)
        if ttype == 13:
            kt, vt = self.unpack(">b"), self.unpack(">b")
            n = self.count(self.unpack(">i"), 2)
            return [(self.value(kt, depth + 1), self.value(vt, depth + 1)) for _ in range(n)]
        if ttype in (14, 15):
            et = self.unpack(">b")
            n = self.count(self.unpack(">i"), 1)
            return [self.value(et, depth + 1) for _ in range(n)]
        raise StormStateError(f"unknown Thrift type {ttype} at byte {self.pos}")

    def struct(self, depth: int = 0) -> dict:
        fields: dict = {}
        while True:
            ttype = self.unpack(">b")
            if ttype == 0:
                return fields
            fid = self.unpack(">h")
            fields[fid] = self.value(ttype, depth)


def read_struct(buf: bytes) -> dict:
    """A TBinaryProtocol struct as {field id: value} (strings as bytes, maps as (key, value) pairs)."""
    r = _Reader(buf)
    out = r.struct()
    if r.pos != len(buf):
        raise StormStateError(f"{len(buf) - r.pos} bytes after the struct")
    return out


def storm_base_status(data: bytes) -> str:
    """TopologyStatus of a gzipped StormBase (storms/<id>): ACTIVE, INACTIVE, REBALANCING or KILLED."""
    status = read_struct(gunzip(data)).get(2)
    if not isinstance(status, int) or status not in STATUS:
        raise StormStateError(f"StormBase without a known status ({status!r})")
    return STATUS[status]


def assigned_nodes(data: bytes) -> set[str]:
    """Supervisor ids of a gzipped Assignment (assignments/<id>): the nodes of executor_node_port."""
    pairs = read_struct(gunzip(data)).get(3, [])
    if not isinstance(pairs, list):
        raise StormStateError("Assignment.executor_node_port is not a map")
    nodes = set()
    for _, info in pairs:
        node = info.get(1) if isinstance(info, dict) else None
        if not isinstance(node, bytes):
            raise StormStateError("Assignment.executor_node_port holds a NodeInfo without a node")
        nodes.add(node.decode("utf-8", "replace"))
    return nodes


# -- liveness ----------------------------------------------------------------------------------------------
def _get(client, path: str) -> bytes | None:
    try:
        data, _ = client.get(path)
    except NoNodeError:
        return None
    return data or b""


def topology_liveness(client, root: str, storm_id: str | None) -> Liveness:
    """Whether the topology `storm_id` runs, from Storm's znodes below `root` (see the module text)."""
    if not storm_id:
        return Liveness(UNKNOWN, "the spout's offset znode names no topology id")
    try:
        base = child_path(root, "storms", storm_id)
        assignment = child_path(root, "assignments", storm_id)
    except UnsafeZnodeName as e:
        return Liveness(UNKNOWN, f"topology id not usable as a znode name: {e}")
    where = f"Storm's state below {root!r}"
    try:
        if client.exists(child_path(root, "storms")) is None or client.exists(child_path(root, "assignments")) is None:
            return Liveness(UNKNOWN, f"no {where} in this ZooKeeper (storms/ and assignments/ absent): the topology's "
                                     "Storm cluster keeps its state elsewhere")
        data = _get(client, base)
        if data is None:
            return Liveness(NOT_RUNNING, f"topology {storm_id} is not registered in {root}/storms (killed and removed)")
        status = storm_base_status(data)
        if status in ("KILLED", "INACTIVE"):
            return Liveness(NOT_RUNNING, f"topology {storm_id} is {status} in {root}/storms")
        data = _get(client, assignment)
        if data is None:
            return Liveness(NOT_RUNNING, f"topology {storm_id} has no assignment in {root}/assignments")
        nodes = assigned_nodes(data)
        registered = set(client.get_children(child_path(root, "supervisors"))) if nodes else set()
        alive = sorted(nodes & registered)
        if alive:
            return Liveness(RUNNING, f"topology {storm_id} is {status} and assigned to {len(alive)} registered "
                                     f"supervisor(s)")
        return Liveness(NOT_RUNNING, f"topology {storm_id} is {status} but none of the {len(nodes)} supervisor(s) it "
                                     f"is assigned to is registered in {root}/supervisors (its workers are gone)")
    except StormStateError as e:
        return Liveness(UNKNOWN, f"{where} for topology {storm_id} is not readable: {e}")
    except NoNodeError:
        return Liveness(UNKNOWN, f"{where} changed while it was read")
    except KazooException as e:
        return Liveness(UNKNOWN, f"{where} is not readable ({type(e).__name__})")
