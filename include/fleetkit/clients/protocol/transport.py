"""Connections to brokers: the socket (TLS when the listener is), the ApiVersions question, the SASL
login, the request versions both sides speak, pipelined requests and the first bootstrap server
that answers. What is sent and read is declared in `messages`; nothing here knows a field.

ApiVersions v0 (API key 18) is asked first: which versions of each request the broker accepts.
Brokers from 0.10 on answer it. 0.9 does not know it: it logs an error and leaves the request
unanswered (other old servers close the connection or answer an error); after
API_VERSIONS_TIMEOUT, a close or an error answer, the broker is spoken to in version 0 of the APIs
it knows (`Api.in_0_9`). Callers that know the cluster predates 0.10 (the fleet file's
kafka_version) skip the question (api_versions=False). Brokers drop old request versions over time
(Kafka 4.0 dropped many, KIP-896), so each request goes out in the highest version both sides
speak. Every response is at most MAX_RESPONSE bytes.
"""

from __future__ import annotations

import logging
import socket
import struct

from fleetkit.clients import wire_security
from fleetkit.clients.protocol.messages import API_VERSIONS, Api
from fleetkit.clients.protocol.schema import error_name

log = logging.getLogger(__name__)

#: how long a broker may take to answer ApiVersions before it is taken for one that cannot (0.9)
API_VERSIONS_TIMEOUT = 3.0
#: the largest response accepted (Fetch answers ask at most 32 MiB)
MAX_RESPONSE = 128 * 1024 * 1024


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


class Connection:
    def __init__(self, host: str, port: int, timeout: float, security=None):
        self.addr = f"{host}:{port}"
        self.sock = socket.create_connection((host, port), timeout=timeout)
        if security is not None and security.tls:
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


class Broker:
    """A connection to one broker, logged in, and the request versions it accepts (`versions`
    None: it cannot answer ApiVersions, so version 0 of what 0.9 knows)."""

    def __init__(self, host: str, port: int, timeout: float, api_versions: bool = True, security=None):
        self.host, self.port, self.timeout, self.security = host, port, timeout, security
        self.conn = Connection(host, port, timeout, security)
        self.versions: dict[int, tuple[int, int]] | None = None
        try:
            if api_versions or (security is not None and security.sasl):
                self._negotiate()
            if security is not None and security.sasl:
                wire_security.login(self, security)
        except BaseException:
            self.conn.close()
            raise

    def _negotiate(self) -> None:
        try:
            self.conn.sock.settimeout(min(self.timeout, API_VERSIONS_TIMEOUT))
            self.conn.send(API_VERSIONS.encode_request(0, -1))
            payload = self.conn.payload()
            self.conn.sock.settimeout(self.timeout)
        except (ConnectionError, socket.timeout) as e:
            # Kafka 0.9 leaves a request type it does not know unanswered; others close
            log.info("broker %s:%s did not answer ApiVersions (%s): speaking version 0 to it", self.host, self.port,
                     e or type(e).__name__)
            self.conn.close()
            self.conn = Connection(self.host, self.port, self.timeout, self.security)
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

    def version(self, api: Api, at_least: int = 0) -> int | None:
        """The version to speak (None, with a warning naming both ranges, when there is none)."""
        v = api.pick_version(self.versions, at_least)
        if v is None:
            lo, hi = self.versions.get(api.key, (None, None)) if self.versions else (None, None)
            log.warning("broker %s:%s accepts %s versions %s-%s, this client speaks %s-%s", self.host, self.port,
                        api.name, lo, hi, max(api.versions[0], at_least), api.versions[1])
        return v

    def call(self, api: Api, version: int, values: dict | None = None) -> dict:
        """One request and its answer (struct.error when the answer cannot be read)."""
        return self.pipeline(api, version, [values or {}])[0]

    def pipeline(self, api: Api, version: int, requests: list[dict], window: int = 500) -> list[dict]:
        """The answers to `requests`, sent `window` at a time on this connection (a broker answers
        in request order: the correlation ids are checked)."""
        out: list[dict] = []
        for start in range(0, len(requests), window):
            batch = requests[start:start + window]
            self.conn.send(b"".join(api.encode_request(version, start + i, values) for i, values in enumerate(batch)))
            for i in range(len(batch)):
                cid, answer = api.decode_response(version, self.conn.payload())
                if cid != start + i:
                    raise ConnectionError(f"broker {self.conn.addr}: responses out of order")
                out.append(answer)
        return out

    def close(self) -> None:
        self.conn.close()


def decode_api_versions(payload: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """(error code, {api key: (min, max)}) of an ApiVersions v0 response."""
    _, answer = API_VERSIONS.decode_response(0, payload)
    return answer["ErrorCode"], {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in answer["ApiKeys"]}


def broker_versions(address: str, timeout: float = 10.0, security=None) -> dict[int, tuple[int, int]] | None:
    """What one broker (host:port) answers to ApiVersions v0: {api key: (min, max)}, or None when
    it cannot answer (0.9). For diagnostics and checks."""
    ((host, port),) = parse_servers(address)
    broker = Broker(host, port, timeout, security=security)
    try:
        return broker.versions
    finally:
        broker.close()


def ask_first(bootstrap: str, what: str, ask, timeout: float = 10.0, api_versions: bool = True,
              error: type[Exception] = ConnectionError, security=None):
    """ask(broker) on the first bootstrap server that connects and answers (a connection or
    decoding failure moves on to the next server); raises `error` naming `what` when none does.
    A refused login or TLS handshake (wire_security) is raised at once, never retried.
    The broker connection is closed afterwards."""
    last: Exception | None = None
    for host, port in parse_servers(bootstrap):
        try:
            broker = Broker(host, port, timeout, api_versions, security)
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
