"""TLS / SASL settings of the toolkit's protocol client (fleetkit.clients.wire_security): parsed from
the connection's librdkafka names, errors naming the key, the password never shown. The login
itself runs against the real SASL_SSL lab broker in tests/integration/test_secured_cluster.py;
here a stand-in broker checks the refusal path of a PLAIN login and the bound on response sizes."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from fleetkit.clients import wire, wire_security
from fleetkit.clients.protocol import messages as m
from fleetkit.clients.protocol import transport
from fleetkit.clients.wire_security import Security
from fleetkit.core.errors import AuthenticationFailed, FleetConfigError, NotAuthorized
from tests.helpers import GIVE_UP, not_waited_out

SECRET = "s3cr3t-Pa55"
BASE = {"bootstrap.servers": "127.0.0.1:1"}


def test_plaintext_by_default():
    s = Security.from_config(BASE)
    assert s.protocol == "PLAINTEXT" and not s.tls and not s.sasl and s.principal == "User:ANONYMOUS"


def test_sasl_ssl_settings_from_librdkafka_names():
    s = Security.from_config(dict(BASE, **{
        "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "fleet",
        "sasl.password": SECRET, "ssl.ca.location": "/x/ca.pem", "ssl.endpoint.identification.algorithm": "none"}),
        cluster="prod")
    assert (s.protocol, s.mechanism, s.username, s.ca_location) == ("SASL_SSL", "SCRAM-SHA-512", "fleet", "/x/ca.pem")
    assert s.tls and s.sasl and not s.check_hostname and s.principal == "User:fleet"
    assert Security.from_config(dict(BASE, **{"security.protocol": "SSL"})).check_hostname  # librdkafka's default


def test_password_never_in_repr_or_str():
    s = Security.from_config(dict(BASE, **{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                          "sasl.username": "u", "sasl.password": SECRET,
                                          "ssl.key.password": SECRET + "k"}))
    assert SECRET not in repr(s) and SECRET not in str(s)


def test_sasl_without_username_names_the_key():
    with pytest.raises(FleetConfigError, match=r"cluster 'prod'.*needs sasl\.username"):
        Security.from_config(dict(BASE, **{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                           "sasl.password": SECRET}), cluster="prod")


def test_sasl_without_password_names_the_key():
    with pytest.raises(FleetConfigError, match=r"needs sasl\.password"):
        Security.from_config(dict(BASE, **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                           "sasl.username": "u"}))


def test_unknown_mechanism_and_protocol_are_refused():
    with pytest.raises(FleetConfigError, match=r"sasl\.mechanism 'SCRAM-SHA-1'"):
        Security.from_config(dict(BASE, **{"security.protocol": "SASL_SSL", "sasl.mechanism": "scram-sha-1",
                                           "sasl.username": "u", "sasl.password": SECRET}))
    with pytest.raises(FleetConfigError, match=r"security\.protocol 'TLS'"):
        Security.from_config(dict(BASE, **{"security.protocol": "TLS"}))


@pytest.mark.parametrize("cfg,ok", [
    ({}, True), ({"security.protocol": "SSL"}, True),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256"}, True),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, True),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, False),
    ({"security.protocol": "SASL_SSL"}, False),  # librdkafka's default mechanism: GSSAPI
])
def test_wire_client_is_used_where_it_can_log_in(cfg, ok):
    assert wire.supported(dict(BASE, **cfg)) is ok


def test_unreadable_ca_names_the_key(tmp_path):
    s = Security.from_config(dict(BASE, **{"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "no.pem")}))
    with pytest.raises(FleetConfigError, match=r"ssl\.ca\.location"):
        s.ssl_context()


def test_not_authorized_is_one_line():
    e = NotAuthorized("Read", "topic", "__consumer_offsets", "User:fleet", "prod", "TOPIC_AUTHORIZATION_FAILED")
    assert str(e) == ("not authorized: fleet may not READ topic '__consumer_offsets' on prod "
                      "(TOPIC_AUTHORIZATION_FAILED)")
    assert (e.operation, e.resource, e.principal) == ("READ", "topic __consumer_offsets", "User:fleet")


# -- a stand-in broker ------------------------------------------------------------------------
def _frame(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


class SaslStandIn:
    """Answers ApiVersions (SaslHandshake 0-1, SaslAuthenticate 0-2), accepts PLAIN in the
    handshake and refuses every SaslAuthenticate with SASL_AUTHENTICATION_FAILED (or, with
    `huge`, announces a 2 GiB answer to ApiVersions)."""

    def __init__(self, huge: bool = False):
        self.huge, self.tokens = huge, []
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            conn, _ = self.srv.accept()
        except OSError:
            return
        with conn:
            f = conn.makefile("rb")
            while True:
                try:
                    head = f.read(4)
                    req = f.read(int.from_bytes(head, "big")) if len(head) == 4 else b""
                except OSError:  # the client closed with our answer unread
                    return
                if not req:
                    return
                key, cid = int.from_bytes(req[0:2], "big"), req[4:8]
                if key == 18:
                    if self.huge:
                        conn.sendall(struct.pack(">i", 2 ** 31 - 1) + cid)
                        continue
                    body = struct.pack(">hi", 0, 2) + struct.pack(">hhh", 17, 0, 1) + struct.pack(">hhh", 36, 0, 2)
                    conn.sendall(_frame(cid + body))
                elif key == 17:
                    conn.sendall(_frame(cid + struct.pack(">hi", 0, 1) + struct.pack(">h", 5) + b"PLAIN"))
                elif key == 36:
                    self.tokens.append(req)
                    msg = b"Authentication failed: Invalid username or password"
                    conn.sendall(_frame(cid + struct.pack(">hh", 58, len(msg)) + msg + struct.pack(">iq", 0, 0)))
                    return

    def close(self):
        self.srv.close()


def test_refused_login_names_user_and_cluster_without_the_password():
    srv = SaslStandIn()
    try:
        s = Security.from_config(dict(BASE, **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                               "sasl.username": "fleet", "sasl.password": SECRET}), cluster="prod")
        with not_waited_out(), pytest.raises(AuthenticationFailed) as e:
            wire.partition_leaders(f"127.0.0.1:{srv.port}", ["t"], timeout=GIVE_UP, security=s)
        assert str(e.value) == ("authentication failed for fleet on prod: Authentication failed: Invalid username "
                                "or password")
        assert SECRET not in str(e.value) and SECRET not in repr(e.value)
        assert srv.tokens and srv.tokens[0][2:4] == b"\x00\x01"  # SaslAuthenticate v1
    finally:
        srv.close()


def test_a_response_size_beyond_the_bound_is_refused():
    srv = SaslStandIn(huge=True)
    try:
        conn = transport.Connection("127.0.0.1", srv.port, 5)
        conn.send(m.API_VERSIONS.encode_request(0, 0))
        with pytest.raises(ConnectionError, match="announced a response of 2147483647 bytes"):
            conn.payload()
        conn.close()
    finally:
        srv.close()


def test_login_needs_sasl_authenticate():
    class B:
        host, port, versions, conn = "h", 1, None, None
    s = Security.from_config(dict(BASE, **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                           "sasl.username": "fleet", "sasl.password": SECRET}))
    with pytest.raises(AuthenticationFailed, match="authentication failed for fleet on h:1: broker h:1 does not"):
        wire_security.login(B(), s)


def test_a_cluster_authorization_refusal_keeps_its_error_name():
    from fleetkit.clients import wire_logs

    # DescribeLogDirs v3 (flexible): correlation id, no tagged fields, throttle, error code 31, no
    # results, no tagged fields
    payload = struct.pack(">ibih", 0, 0, 0, 31) + b"\x01\x00"
    with pytest.raises(wire_logs.Refused) as e:
        wire_logs.log_dirs(m.DESCRIBE_LOG_DIRS.decode_response(3, payload)[1], 1)
    assert e.value.error == "CLUSTER_AUTHORIZATION_FAILED"
    err = wire_logs.not_authorized(e.value.error, None, None, "DescribeLogDirs")
    assert str(err) == ("not authorized: ANONYMOUS may not DESCRIBE cluster 'kafka-cluster' "
                        "(CLUSTER_AUTHORIZATION_FAILED)")
