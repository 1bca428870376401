"""Ask the cluster who coordinates a group, and ask that broker itself: requests on the wire.

confluent-kafka hides the coordinator lookup: when DescribeGroups fails (NOT_COORDINATOR while a
partition loads, say) it reports the error but not which broker it asked, which is exactly what an
ownership check needs. So this module speaks, over plain TCP:

* ApiVersions v0 (API key 18): which versions of each request the broker accepts. Brokers from
  0.10 on answer it. 0.9 does not know it: it logs an error and leaves the request unanswered
  (other old servers close the connection or answer an error); after API_VERSIONS_TIMEOUT, a
  close or an error answer the broker is spoken to in version 0 only. Callers that know the
  cluster predates 0.10 (the fleet file's kafka_version) skip the question (api_versions=False).
  Brokers drop old request versions over time (Kafka 4.0 dropped many, KIP-896; 4.3.1 still
  accepts v0 of FindCoordinator and DescribeGroups), so each request goes out in the highest
  version both sides speak: FindCoordinator v0-v4, DescribeGroups v0-v5 (v6 answers
  GROUP_ID_NOT_FOUND for unknown groups where v0-v5 say Dead), Metadata v7-v8 (leader epochs).
* FindCoordinator (API key 10): any broker names the coordinator of a group (node id, host,
  port) or answers an error (COORDINATOR_NOT_AVAILABLE when the partition has no leader). From
  v4 one request carries many groups.
* DescribeGroups (API key 15), sent to that named broker: the broker's own answer for the group
  (state and members with their consumer-protocol assignments, or NOT_COORDINATOR /
  COORDINATOR_LOAD_IN_PROGRESS).
* Metadata (API key 3, v7+): partition leaders with their leader epochs, for clusters without
  ZooKeeper (KRaft).

Requests are pipelined on one connection per broker (a broker answers in request order), so a
thousand groups cost a few round trips. Connections speak the listener's security protocol
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL with PLAIN or SCRAM: fleetkit.clients.wire_security,
from the connection's librdkafka settings); for other SASL mechanisms (GSSAPI, OAUTHBEARER)
`supported()` is False and callers use the admin client's describe instead. Every length read from
the wire is bounded (a response is at most MAX_RESPONSE bytes).

Schemas: Kafka's clients/src/main/resources/common/message/{RequestHeader, ResponseHeader,
ApiVersions*, FindCoordinator*, DescribeGroups*, Metadata*, ConsumerProtocolAssignment}.json.
Flexible versions (FindCoordinator v3+,
DescribeGroups v5+) use request header v2 / response header v1, compact strings, arrays and
bytes (unsigned varint length + 1) and tagged fields; ApiVersions responses always use
response header v0.
"""

from __future__ import annotations

import logging
import socket
import struct
from dataclasses import dataclass, field
from typing import Iterable

from fleetkit.clients import wire_codec as codec
# the codec's names this module's decoders (and wire_logs) use
from fleetkit.clients.wire_codec import (ERRORS, MAX_STRING, NO_TAGS, Reader, error_name,  # noqa: F401
                                         response_reader)
from fleetkit.clients.wire_codec import array_len as _array_len, string as _string  # noqa: F401
from fleetkit.clients.wire_codec import utf8 as _utf8, uvarint as _uvarint  # noqa: F401

log = logging.getLogger(__name__)

UNREACHABLE = "COORDINATOR_UNREACHABLE"  # the named coordinator did not answer at all
UNSUPPORTED = "UNSUPPORTED_VERSION"      # the broker accepts none of the versions spoken here
#: how long a broker may take to answer ApiVersions before it is taken for one that cannot (0.9)
API_VERSIONS_TIMEOUT = 3.0
#: the largest response accepted (Fetch answers ask at most 32 MiB)
MAX_RESPONSE = 128 * 1024 * 1024

API_VERSIONS, FIND_COORDINATOR, DESCRIBE_GROUPS, METADATA = 18, 10, 15, 3
CONSUMER_GROUP_DESCRIBE = 69  # KIP-848 consumer groups (Kafka 4): DescribeGroups knows classic groups only
API_NAMES = {API_VERSIONS: "ApiVersions", FIND_COORDINATOR: "FindCoordinator", DESCRIBE_GROUPS: "DescribeGroups",
             METADATA: "Metadata", CONSUMER_GROUP_DESCRIBE: "ConsumerGroupDescribe"}
#: versions implemented here, per API key (inclusive). Metadata only from v7, the first with
#: leader epochs (what ZooKeeper's partition state gives on ZooKeeper-mode clusters).
IMPLEMENTED = {FIND_COORDINATOR: (0, 4), DESCRIBE_GROUPS: (0, 5), METADATA: (7, 8), CONSUMER_GROUP_DESCRIBE: (0, 1)}
#: first flexible version, per API key
FLEXIBLE_FROM = {API_VERSIONS: 3, FIND_COORDINATOR: 3, DESCRIBE_GROUPS: 5, METADATA: 9, CONSUMER_GROUP_DESCRIBE: 0}
#: FindCoordinator v4 carries many keys in one request
BATCHED_FIND_FROM = 4
KEY_TYPE_GROUP = 0


def supported(config: dict) -> bool:
    """True when the wire client can speak the config's security protocol and SASL mechanism."""
    from fleetkit.clients import wire_security

    return wire_security.supported(config)


def parse_servers(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError(f"no bootstrap servers in {bootstrap!r}")
    return out


def pick_version(api_key: int, broker: dict[int, tuple[int, int]] | None) -> int | None:
    """The highest version of `api_key` both the broker and this module speak.

    `broker` is the broker's ApiVersions answer ({api key: (min, max)}), or None for a broker
    that cannot answer ApiVersions (0.9: version 0 of everything). None when there is no common
    version."""
    lo, hi = IMPLEMENTED[api_key]
    if broker is None:
        return 0 if lo == 0 else None
    if api_key not in broker:
        return None
    b_lo, b_hi = broker[api_key]
    lo, hi = max(lo, b_lo), min(hi, b_hi)
    return hi if lo <= hi else None


@dataclass
class Answer:
    """What the cluster says about one group."""

    group: str
    coordinator_id: int | None = None   # who the lookup names
    coordinator: str | None = None      # its host:port
    lookup_error: str | None = None
    describe_error: str | None = None   # what the named coordinator itself answered
    state: str | None = None
    members: list[tuple[str, str, str]] = field(default_factory=list)  # (member_id, client_id, client_host)
    described: tuple[GroupMember, ...] = ()  # the members as described, with their assignments
    group_type: str | None = None       # "consumer" when ConsumerGroupDescribe described it (KIP-848)
    group_epoch: int | None = None      # KIP-848 groups: the group epoch

    @property
    def error(self) -> str | None:
        return self.lookup_error or self.describe_error


@dataclass(frozen=True)
class Coordinator:
    """One key of a FindCoordinator answer."""

    key: str
    error: int
    node_id: int
    host: str | None
    port: int


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    #: (topic, partition) pairs of a consumer-protocol member's assignment, sorted; None when the
    #: broker sent none (the group is rebalancing, or it is not a consumer group)
    assignment: tuple[tuple[str, int], ...] | None = None
    #: KIP-848 members: the member's epoch (below the group epoch while it reconciles); None for classic
    member_epoch: int | None = None


@dataclass(frozen=True)
class DescribedGroup:
    """One group of a DescribeGroups answer."""

    error: int
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...]


@dataclass(frozen=True)
class ConsumerGroup:
    """One group of a ConsumerGroupDescribe answer (KIP-848)."""

    error: int
    group: str
    state: str
    group_epoch: int
    assignment_epoch: int
    members: tuple[GroupMember, ...]


@dataclass(frozen=True)
class PartitionLeader:
    """One partition of a Metadata answer."""

    topic: str
    partition: int
    error: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


# -- encoding ---------------------------------------------------------------------------------
def encode_request(api_key: int, version: int, correlation_id: int, body: bytes, client_id: str = "fleetkit") -> bytes:
    """A size-prefixed request of an API spoken here (flexible from FLEXIBLE_FROM's version):
    wire_codec.encode_request."""
    return codec.encode_request(api_key, version, correlation_id, body, version >= FLEXIBLE_FROM[api_key], client_id)


def api_versions_request(correlation_id: int) -> bytes:
    """ApiVersions v0: no body."""
    return encode_request(API_VERSIONS, 0, correlation_id, b"")


def find_coordinator_body(version: int, keys: list[str]) -> bytes:
    """FindCoordinator request body: one key up to v3 (v1+ adds KeyType, v3 is flexible), a
    KeyType and the array of keys from v4."""
    flexible = version >= FLEXIBLE_FROM[FIND_COORDINATOR]
    if version >= BATCHED_FIND_FROM:
        return (struct.pack(">b", KEY_TYPE_GROUP) + _array_len(len(keys), True)
                + b"".join(_string(k, True) for k in keys) + NO_TAGS)
    if len(keys) != 1:
        raise ValueError(f"FindCoordinator v{version} carries exactly one key, not {len(keys)}")
    body = _string(keys[0], flexible)
    if version >= 1:
        body += struct.pack(">b", KEY_TYPE_GROUP)
    return body + (NO_TAGS if flexible else b"")


def describe_groups_body(version: int, groups: list[str]) -> bytes:
    """DescribeGroups request body: the group ids (v3+ adds IncludeAuthorizedOperations=false,
    v5 is flexible)."""
    flexible = version >= FLEXIBLE_FROM[DESCRIBE_GROUPS]
    body = _array_len(len(groups), flexible) + b"".join(_string(g, flexible) for g in groups)
    if version >= 3:
        body += b"\x00"
    return body + (NO_TAGS if flexible else b"")


def consumer_group_describe_body(version: int, groups: list[str]) -> bytes:
    # GroupIds [] compact string, IncludeAuthorizedOperations bool, tagged fields (flexible from v0)
    return (_array_len(len(groups), True) + b"".join(_string(g, True) for g in groups)
            + b"\x00" + NO_TAGS)


def metadata_body(version: int, topics: list[str]) -> bytes:
    """Metadata request body (v7-v8; v0 for brokers that answer no ApiVersions): the topics,
    never auto-created (v4+; v0 creates a missing topic when the broker auto-creates topics); v8
    asks for no authorized operations."""
    for t in topics:
        _utf8(t, "topic name")
    body = _array_len(len(topics), False) + b"".join(_string(t) for t in topics)
    if version >= 4:
        body += b"\x00"
    if version >= 8:
        body += b"\x00\x00"
    return body


# -- decoding ---------------------------------------------------------------------------------
def decode_consumer_assignment(data: bytes | None) -> tuple[tuple[str, int], ...] | None:
    """The (topic, partition) pairs of a ConsumerProtocolAssignment (any version: later versions
    only append fields), sorted; None for empty or unreadable bytes."""
    if not data:
        return None
    try:
        r = Reader(data)
        r.int16()  # version
        out = []
        for _ in range(r.array_len()):
            topic = r.string() or ""
            out.extend((topic, r.int32()) for _ in range(r.array_len()))
        return tuple(sorted(out))
    except struct.error:
        return None


def decode_api_versions(payload: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """(error code, {api key: (min, max)}) of an ApiVersions v0 response (header v0)."""
    _, r = response_reader(payload, False)
    err = r.int16()
    out = {}
    for _ in range(r.array_len()):
        key, lo, hi = r.int16(), r.int16(), r.int16()
        out[key] = (lo, hi)
    return err, out


def decode_find_coordinator(version: int, payload: bytes, keys: list[str]) -> tuple[int, list[Coordinator]]:
    """(correlation id, one Coordinator per key) of a FindCoordinator response; before v4 the
    response names no key and answers for the single key sent (`keys`)."""
    flexible = version >= FLEXIBLE_FROM[FIND_COORDINATOR]
    cid, r = response_reader(payload, flexible)
    if version >= 1:
        r.int32()  # throttle time
    if version >= BATCHED_FIND_FROM:
        out = []
        for _ in range(r.array_len(True)):
            key = r.string(True)
            node, host, port, err = r.int32(), r.string(True), r.int32(), r.int16()
            r.string(True)  # error message
            r.skip_tags()
            out.append(Coordinator(key or "", err, node, host, port))
        r.skip_tags()
        return cid, out
    err = r.int16()
    if version >= 1:
        r.string(flexible)  # error message
    node, host, port = r.int32(), r.string(flexible), r.int32()
    if flexible:
        r.skip_tags()
    return cid, [Coordinator(keys[0], err, node, host, port)]


def decode_describe_groups(version: int, payload: bytes) -> tuple[int, list[DescribedGroup]]:
    """(correlation id, the described groups) of a DescribeGroups response."""
    flexible = version >= FLEXIBLE_FROM[DESCRIBE_GROUPS]
    cid, r = response_reader(payload, flexible)
    if version >= 1:
        r.int32()  # throttle time
    groups = []
    for _ in range(r.array_len(flexible)):
        err = r.int16()
        g = r.string(flexible) or ""
        state, ptype, proto = r.string(flexible) or "", r.string(flexible) or "", r.string(flexible) or ""
        members = []
        for _ in range(r.array_len(flexible)):
            mid = r.string(flexible) or ""
            instance = r.string(flexible) if version >= 4 else None
            client_id, host = r.string(flexible) or "", r.string(flexible) or ""
            r.skip_bytes(flexible)  # member metadata
            assignment = r.bytes_(flexible)
            if flexible:
                r.skip_tags()
            members.append(GroupMember(mid, instance, client_id, host,
                                       decode_consumer_assignment(assignment) if ptype == "consumer" else None))
        if version >= 3:
            r.int32()  # authorized operations
        if flexible:
            r.skip_tags()
        groups.append(DescribedGroup(err, g, state, ptype, proto, tuple(members)))
    if flexible:
        r.skip_tags()
    return cid, groups


def _consumer_assignment(r: Reader) -> tuple[tuple[str, int], ...]:
    """A ConsumerGroupDescribe Assignment struct: [topic id (uuid), topic name, [partition]]."""
    out = []
    for _ in range(r.array_len(True)):
        r._take(16)  # topic id
        topic = r.string(True) or ""
        out.extend((topic, r.int32()) for _ in range(r.array_len(True)))
        r.skip_tags()
    r.skip_tags()
    return tuple(sorted(out))


def decode_consumer_group_describe(version: int, payload: bytes) -> tuple[int, list[ConsumerGroup]]:
    """(correlation id, the described groups) of a ConsumerGroupDescribe response (v0-v1)."""
    cid, r = response_reader(payload, True)
    r.int32()  # throttle time
    groups = []
    for _ in range(r.array_len(True)):
        err = r.int16()
        r.string(True)  # error message
        g, state = r.string(True) or "", r.string(True) or ""
        group_epoch, assignment_epoch = r.int32(), r.int32()
        r.string(True)  # assignor name
        members = []
        for _ in range(r.array_len(True)):
            mid = r.string(True) or ""
            instance = r.string(True)
            r.string(True)  # rack
            epoch = r.int32()
            client_id, host = r.string(True) or "", r.string(True) or ""
            for _ in range(r.array_len(True)):  # subscribed topic names
                r.string(True)
            r.string(True)  # subscribed regex
            assignment = _consumer_assignment(r)
            _consumer_assignment(r)  # target assignment
            if version >= 1:
                r.int8()  # member type
            r.skip_tags()
            members.append(GroupMember(mid, instance, client_id, host, assignment, member_epoch=epoch))
        r.int32()  # authorized operations
        r.skip_tags()
        groups.append(ConsumerGroup(err, g, state, group_epoch, assignment_epoch, tuple(members)))
    r.skip_tags()
    return cid, groups


def decode_metadata(version: int, payload: bytes) -> tuple[int, dict[int, str], dict[str, int], list[PartitionLeader]]:
    """(correlation id, {broker id: host:port}, {topic: error code} of topics answered with an
    error, partitions) of a Metadata v7-v8 response, or of v0 (leader epochs -1)."""
    cid, r = response_reader(payload, False)
    if version >= 3:
        r.int32()  # throttle time
    brokers = {}
    for _ in range(r.array_len()):
        node, host, port = r.int32(), r.string(), r.int32()
        if version >= 1:
            r.string()  # rack
        brokers[node] = f"{host}:{port}"
    if version >= 2:
        r.string()  # cluster id
    if version >= 1:
        r.int32()  # controller id
    errors: dict[str, int] = {}
    parts = []
    for _ in range(r.array_len()):
        terr, topic = r.int16(), r.string() or ""
        if version >= 1:
            r.int8()  # is internal
        if terr:
            errors[topic] = terr
        for _ in range(r.array_len()):
            perr, p, leader = r.int16(), r.int32(), r.int32()
            epoch = r.int32() if version >= 7 else -1
            replicas = tuple(r.int32() for _ in range(r.array_len()))
            isr = tuple(r.int32() for _ in range(r.array_len()))
            for _ in range(r.array_len() if version >= 5 else 0):
                r.int32()  # offline replicas
            parts.append(PartitionLeader(topic, p, perr, leader, epoch, replicas, isr))
        if version >= 8:
            r.int32()  # topic authorized operations
    if version >= 8:
        r.int32()  # cluster authorized operations
    return cid, brokers, errors, parts


# -- connections ------------------------------------------------------------------------------
class _Connection:
    def __init__(self, host: str, port: int, timeout: float, security=None):
        self.addr = f"{host}:{port}"
        self.sock = socket.create_connection((host, port), timeout=timeout)
        if security is not None and security.tls:
            from fleetkit.clients import wire_security

            self.sock = wire_security.wrap(self.sock, host, port, security)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _exact(self, n: int) -> bytes:
        """The next n bytes of the connection, received into one buffer (an answer of 32 MB is
        not grown chunk by chunk)."""
        out = bytearray(n)
        view, have = memoryview(out), 0
        while have < n:
            got = self.sock.recv_into(view[have:], n - have)
            if not got:
                raise ConnectionError(f"broker {self.addr} closed the connection")
            have += got
        return bytes(out)

    def payload(self) -> bytes:
        (size,) = struct.unpack(">i", self._exact(4))
        if size < 0 or size > MAX_RESPONSE:
            raise ConnectionError(f"broker {self.addr} announced a response of {size} bytes (at most {MAX_RESPONSE} "
                                  f"accepted): not a Kafka answer, or a listener of another security protocol")
        return self._exact(size)

    def close(self) -> None:
        try:  # shutdown first: a receiver blocked in recv on another thread wakes up at once
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


class _Broker:
    """A connection to one broker and the request versions it accepts (None: it cannot answer
    ApiVersions, so version 0 of everything)."""

    def __init__(self, host: str, port: int, timeout: float, api_versions: bool = True, security=None):
        self.host, self.port, self.timeout, self.security = host, port, timeout, security
        self.conn = _Connection(host, port, timeout, security)
        self.versions: dict[int, tuple[int, int]] | None = None
        try:
            if api_versions or (security is not None and security.sasl):
                self._negotiate()
            if security is not None and security.sasl:
                from fleetkit.clients import wire_security

                wire_security.login(self, security)
        except BaseException:
            self.conn.close()
            raise

    def _negotiate(self) -> None:
        try:
            self.conn.sock.settimeout(min(self.timeout, API_VERSIONS_TIMEOUT))
            self.conn.send(api_versions_request(-1))
            payload = self.conn.payload()
            self.conn.sock.settimeout(self.timeout)
        except (ConnectionError, socket.timeout) as e:
            # Kafka 0.9 leaves a request type it does not know unanswered; others close
            log.info("broker %s:%s did not answer ApiVersions (%s): speaking version 0 to it", self.host, self.port,
                     e or type(e).__name__)
            self.conn.close()
            self.conn = _Connection(self.host, self.port, self.timeout, self.security)
            return
        try:
            err, versions = decode_api_versions(payload)
        except struct.error as e:
            raise ConnectionError(f"broker {self.host}:{self.port} answered ApiVersions unreadably: {e}") from None
        if err and not versions:
            log.debug("broker %s:%s answered ApiVersions with %s: speaking version 0", self.host, self.port,
                      error_name(err))
            return
        self.versions = versions

    def version(self, api_key: int) -> int | None:
        v = pick_version(api_key, self.versions)
        if v is None:
            lo, hi = self.versions.get(api_key, (None, None)) if self.versions else (None, None)
            log.warning("broker %s:%s accepts %s versions %s-%s, this client speaks %s-%s", self.host, self.port,
                        API_NAMES[api_key], lo, hi, *IMPLEMENTED[api_key])
        return v

    def close(self) -> None:
        self.conn.close()


def broker_versions(address: str, timeout: float = 10.0, security=None) -> dict[int, tuple[int, int]] | None:
    """What one broker (host:port) answers to ApiVersions v0: {api key: (min, max)}, or None when
    it cannot answer (0.9). For diagnostics and checks; `probe` asks by itself."""
    ((host, port),) = parse_servers(address)
    broker = _Broker(host, port, timeout, security=security)
    try:
        return broker.versions
    finally:
        broker.close()


def partition_leaders(bootstrap: str, topics: Iterable[str], timeout: float = 10.0,
                      api_versions: bool = True, security=None) -> tuple[list[PartitionLeader], dict[str, str]] | None:
    """(partitions with leader, leader epoch, replicas and ISR, {topic: error name}) of `topics`
    from the first bootstrap server that answers; topics are never auto-created. None when that
    broker speaks no Metadata version with leader epochs (before Kafka 1.0)."""
    topics = sorted(set(topics))

    def ask(broker: _Broker):
        version = broker.version(METADATA) if broker.versions is not None else None
        if version is None:
            return None
        broker.conn.send(encode_request(METADATA, version, 0, metadata_body(version, topics)))
        _, _, errors, parts = decode_metadata(version, broker.conn.payload())
        return parts, {t: error_name(e) or "" for t, e in errors.items()}

    return ask_first(bootstrap, "a metadata request", ask, timeout, api_versions, security=security)


def ask_first(bootstrap: str, what: str, ask, timeout: float = 10.0, api_versions: bool = True,
              error: type[Exception] = ConnectionError, security=None):
    """ask(broker) on the first bootstrap server that connects and answers (a connection or
    decoding failure moves on to the next server); raises `error` naming `what` when none does.
    A refused login or TLS handshake (wire_security) is raised at once, never retried.
    The broker connection is closed afterwards."""
    last: Exception | None = None
    for host, port in parse_servers(bootstrap):
        try:
            broker = _Broker(host, port, timeout, api_versions, security)
        except OSError as e:
            last = e
            continue
        try:
            return ask(broker)
        except (OSError, struct.error) as e:  # ConnectionError is an OSError
            last = e
        finally:
            broker.close()
    raise error(f"no bootstrap server of {bootstrap} answered {what}: {last}")


def _find_coordinators(broker: _Broker, groups: list[str], answers: dict[str, Answer]) -> None:
    version = broker.version(FIND_COORDINATOR)
    if version is None:
        for g in groups:
            answers[g].lookup_error = UNSUPPORTED
        return
    sendable = []
    for g in groups:
        try:
            _utf8(g)
            sendable.append(g)
        except ValueError as e:
            answers[g].lookup_error = f"INVALID_GROUP_ID ({e})"
    conn = broker.conn
    if version >= BATCHED_FIND_FROM:
        batch = 500
        chunks = [sendable[i:i + batch] for i in range(0, len(sendable), batch)]
    else:
        batch = 1
        chunks = [[g] for g in sendable]
    for start in range(0, len(chunks), 500):  # at most 500 requests in flight
        window = chunks[start:start + 500]
        conn.send(b"".join(encode_request(FIND_COORDINATOR, version, start + i, find_coordinator_body(version, keys))
                           for i, keys in enumerate(window)))
        for i, keys in enumerate(window):
            cid, coords = decode_find_coordinator(version, conn.payload(), keys)
            if cid != start + i:
                raise ConnectionError(f"broker {conn.addr}: responses out of order")
            for c in coords:
                a = answers.get(c.key)
                if a is None:
                    continue
                if c.error:
                    a.lookup_error = error_name(c.error)
                else:
                    a.coordinator_id, a.coordinator = c.node_id, f"{c.host}:{c.port}"
            if version >= BATCHED_FIND_FROM:
                answered = {c.key for c in coords}
                for g in keys:
                    if g not in answered:
                        answers[g].lookup_error = "NO_ANSWER"


def _describe(broker: _Broker, groups: list[str], answers: dict[str, Answer], batch: int = 200) -> None:
    version = broker.version(DESCRIBE_GROUPS)
    if version is None:
        for g in groups:
            answers[g].describe_error = UNSUPPORTED
        return
    conn = broker.conn
    chunks = [groups[i:i + batch] for i in range(0, len(groups), batch)]
    conn.send(b"".join(encode_request(DESCRIBE_GROUPS, version, i, describe_groups_body(version, chunk))
                       for i, chunk in enumerate(chunks)))
    for i, _ in enumerate(chunks):
        cid, described = decode_describe_groups(version, conn.payload())
        if cid != i:
            raise ConnectionError(f"broker {conn.addr}: responses out of order")
        for d in described:
            if d.group in answers:
                a = answers[d.group]
                a.describe_error = error_name(d.error)
                a.state = d.state if not d.error else None
                a.members = [(m.member_id, m.client_id, m.client_host) for m in d.members]
                a.described = d.members
    # a KIP-848 group is unknown to DescribeGroups (GROUP_ID_NOT_FOUND, or Dead on some brokers)
    again = [g for g in groups if answers[g].describe_error == "GROUP_ID_NOT_FOUND" or answers[g].state == "Dead"]
    if again and broker.versions is not None and broker.version(CONSUMER_GROUP_DESCRIBE) is not None:
        _describe_consumer_groups(broker, again, answers)


def _describe_consumer_groups(broker: _Broker, groups: list[str], answers: dict[str, Answer]) -> None:
    """ConsumerGroupDescribe for groups DescribeGroups did not know: those it describes replace
    the answer (state, members with epochs and assignments); the others keep DescribeGroups'."""
    version = broker.version(CONSUMER_GROUP_DESCRIBE)
    broker.conn.send(encode_request(CONSUMER_GROUP_DESCRIBE, version, 0, consumer_group_describe_body(version, groups)))
    _, described = decode_consumer_group_describe(version, broker.conn.payload())
    for d in described:
        a = answers.get(d.group)
        if a is None or d.error or not d.state:
            continue  # a classic or unknown group: "not a consumer group" / GROUP_ID_NOT_FOUND
        a.describe_error, a.state, a.group_type, a.group_epoch = None, d.state, "consumer", d.group_epoch
        a.members = [(m.member_id, m.client_id, m.client_host) for m in d.members]
        a.described = d.members


def probe(bootstrap: str, groups: Iterable[str], timeout: float = 10.0, api_versions: bool = True,
          security=None) -> dict[str, Answer]:
    """Per group: the coordinator the cluster names and what that broker answers when asked.

    api_versions=False: the cluster is known to predate 0.10 (no ApiVersions): version 0 at once.
    A coordinator that cannot be reached gets describe_error COORDINATOR_UNREACHABLE. Raises
    ConnectionError only when no bootstrap server answers the lookup at all."""
    groups = list(dict.fromkeys(groups))
    answers = {g: Answer(group=g) for g in groups}
    if not groups:
        return answers

    def lookup(broker: _Broker) -> None:
        try:
            _find_coordinators(broker, groups, answers)
        except (OSError, struct.error):
            for a in answers.values():  # a partial answer from a server that failed is not kept
                a.lookup_error = a.coordinator_id = a.coordinator = None
            raise

    ask_first(bootstrap, "the coordinator lookup", lookup, timeout, api_versions, security=security)
    by_broker: dict[str, list[str]] = {}
    for g, a in answers.items():
        if a.coordinator:
            by_broker.setdefault(a.coordinator, []).append(g)
    for addr, gs in by_broker.items():
        host, _, port = addr.rpartition(":")
        try:
            broker = _Broker(host, int(port), timeout, api_versions, security)
        except OSError:
            for g in gs:
                answers[g].describe_error = UNREACHABLE
            continue
        try:
            _describe(broker, gs, answers)
        except (OSError, ConnectionError, struct.error):
            for g in gs:
                if answers[g].describe_error is None and answers[g].state is None:
                    answers[g].describe_error = UNREACHABLE
        finally:
            broker.close()
    return answers
