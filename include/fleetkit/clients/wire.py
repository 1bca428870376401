"""Ask the cluster who coordinates a group, and ask that broker itself: two requests on the wire.

confluent-kafka hides the coordinator lookup: when DescribeGroups fails (NOT_COORDINATOR while a
partition loads, say) it reports the error but not which broker it asked, which is exactly what an
ownership check needs. So this module speaks the two version-0 requests every broker from 0.9 to
3.x answers, over plain TCP:

* GroupCoordinator / FindCoordinator v0 (API key 10): any broker names the coordinator of a group
  (node id, host, port) or answers an error (COORDINATOR_NOT_AVAILABLE when the partition has no
  leader).
* DescribeGroups v0 (API key 15), sent to that named broker: the broker's own answer for the group
  (state and members, or NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS).

Requests are pipelined on one connection per broker (a broker answers in request order), so a
thousand groups cost a few round trips. Only PLAINTEXT listeners are supported; for TLS or SASL
clusters `supported()` is False and callers use the admin client's describe instead.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from typing import Iterable

ERRORS = {
    0: None, -1: "UNKNOWN_SERVER_ERROR", 7: "REQUEST_TIMED_OUT", 14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 24: "INVALID_GROUP_ID",
    25: "UNKNOWN_MEMBER_ID", 30: "GROUP_AUTHORIZATION_FAILED", 35: "UNSUPPORTED_VERSION",
}
UNREACHABLE = "COORDINATOR_UNREACHABLE"  # the named coordinator did not answer at all
MAX_STRING = 32767


def error_name(code: int) -> str | None:
    return ERRORS[code] if code in ERRORS else f"KAFKA_ERROR_{code}"


def supported(config: dict) -> bool:
    """The wire probe speaks PLAINTEXT only."""
    return str(config.get("security.protocol", "plaintext")).lower() == "plaintext"


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

    @property
    def error(self) -> str | None:
        return self.lookup_error or self.describe_error


# -- encoding ---------------------------------------------------------------------------------
def _string(s: str) -> bytes:
    b = s.encode("utf-8", "surrogatepass")
    if len(b) > MAX_STRING:
        raise ValueError(f"group id of {len(b)} UTF-8 bytes is longer than Kafka's {MAX_STRING}")
    return struct.pack(">h", len(b)) + b


def _request(api_key: int, correlation_id: int, body: bytes, client_id: str = "fleetkit") -> bytes:
    payload = struct.pack(">hhi", api_key, 0, correlation_id) + _string(client_id) + body
    return struct.pack(">i", len(payload)) + payload


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def int16(self) -> int:
        (v,) = struct.unpack_from(">h", self.data, self.pos)
        self.pos += 2
        return v

    def int32(self) -> int:
        (v,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return v

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        v = self.data[self.pos:self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return v

    def bytes_(self) -> None:
        n = self.int32()
        self.pos += max(n, 0)


class _Connection:
    def __init__(self, host: str, port: int, timeout: float):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self) -> _Reader:
        (size,) = struct.unpack(">i", self._exact(4))
        return _Reader(self._exact(size))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _find_coordinators(conn: _Connection, groups: list[str], answers: dict[str, Answer], batch: int = 500) -> None:
    for start in range(0, len(groups), batch):
        chunk = groups[start:start + batch]
        sendable = []
        for i, g in enumerate(chunk):
            try:
                sendable.append((start + i, g, _request(10, start + i, _string(g))))
            except ValueError as e:
                answers[g].lookup_error = f"INVALID_GROUP_ID ({e})"
        conn.send(b"".join(r for _, _, r in sendable))
        for cid, g, _ in sendable:
            r = conn.response()
            if r.int32() != cid:
                raise ConnectionError("responses out of order")
            err = r.int16()
            node, host, port = r.int32(), r.string(), r.int32()
            a = answers[g]
            if err:
                a.lookup_error = error_name(err)
            else:
                a.coordinator_id, a.coordinator = node, f"{host}:{port}"


def _describe(conn: _Connection, groups: list[str], answers: dict[str, Answer], batch: int = 200) -> None:
    for start in range(0, len(groups), batch):
        chunk = groups[start:start + batch]
        body = struct.pack(">i", len(chunk)) + b"".join(_string(g) for g in chunk)
        conn.send(_request(15, start, body))
        r = conn.response()
        r.int32()
        for _ in range(r.int32()):
            err = r.int16()
            g = r.string()
            state, _ptype, _proto = r.string(), r.string(), r.string()
            members = []
            for _ in range(r.int32()):
                mid, cid, host = r.string(), r.string(), r.string()
                r.bytes_()
                r.bytes_()
                members.append((mid, cid, host))
            if g in answers:
                answers[g].describe_error = error_name(err)
                answers[g].state = state if not err else None
                answers[g].members = members


def probe(bootstrap: str, groups: Iterable[str], timeout: float = 10.0) -> dict[str, Answer]:
    """Per group: the coordinator the cluster names and what that broker answers when asked.

    A coordinator that cannot be reached gets describe_error COORDINATOR_UNREACHABLE. Raises
    ConnectionError only when no bootstrap server answers the lookup at all."""
    groups = list(dict.fromkeys(groups))
    answers = {g: Answer(group=g) for g in groups}
    if not groups:
        return answers
    last: Exception | None = None
    for host, port in parse_servers(bootstrap):
        try:
            conn = _Connection(host, port, timeout)
        except OSError as e:
            last = e
            continue
        try:
            _find_coordinators(conn, groups, answers)
            break
        except (OSError, ConnectionError, struct.error) as e:
            last = e
            for a in answers.values():
                a.lookup_error = a.coordinator_id = a.coordinator = None
        finally:
            conn.close()
    else:
        raise ConnectionError(f"no bootstrap server of {bootstrap} answered the coordinator lookup: {last}")
    by_broker: dict[str, list[str]] = {}
    for g, a in answers.items():
        if a.coordinator:
            by_broker.setdefault(a.coordinator, []).append(g)
    for addr, gs in by_broker.items():
        host, _, port = addr.rpartition(":")
        try:
            conn = _Connection(host, int(port), timeout)
        except OSError:
            for g in gs:
                answers[g].describe_error = UNREACHABLE
            continue
        try:
            _describe(conn, gs, answers)
        except (OSError, ConnectionError, struct.error):
            for g in gs:
                if answers[g].describe_error is None and answers[g].state is None:
                    answers[g].describe_error = UNREACHABLE
        finally:
            conn.close()
    return answers
