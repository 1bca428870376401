"""Refused logins and missing ACLs, named in one line: the table of authorization errors, the
error_cb that catches librdkafka's SASL refusal, the "not seen" summary, the CLI's blind line."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from fleetkit.clients.kafka import KafkaCluster, LoginTrap, client_config, login_reason
from fleetkit.core.errors import (AUTHORIZATION_ERRORS, AuthenticationFailed, NotAuthorized, authorization_error,
                                  TlsHandshakeFailed, blind_summary, refused)

LIBRDKAFKA_TEXT = ("sasl_ssl://127.0.0.1:22792/bootstrap: SASL authentication error: Authentication failed during "
                   "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 316ms in "
                   "state AUTH_REQ)")


@pytest.mark.parametrize("error, request_, name, expected", [
    ("TOPIC_AUTHORIZATION_FAILED", "Fetch", "__consumer_offsets",
     "not authorized: fleet may not READ topic '__consumer_offsets' on prod (TOPIC_AUTHORIZATION_FAILED)"),
    ("TOPIC_AUTHORIZATION_FAILED", "ListOffsets", "orders",
     "not authorized: fleet may not DESCRIBE topic 'orders' on prod (TOPIC_AUTHORIZATION_FAILED)"),
    ("GROUP_AUTHORIZATION_FAILED", "DescribeGroups", "billing",
     "not authorized: fleet may not DESCRIBE group 'billing' on prod (GROUP_AUTHORIZATION_FAILED)"),
    ("GROUP_AUTHORIZATION_FAILED", "OffsetCommit", "billing",
     "not authorized: fleet may not READ group 'billing' on prod (GROUP_AUTHORIZATION_FAILED)"),
    ("CLUSTER_AUTHORIZATION_FAILED", "DescribeLogDirs", None,
     "not authorized: fleet may not DESCRIBE cluster 'kafka-cluster' on prod (CLUSTER_AUTHORIZATION_FAILED)"),
    ("CLUSTER_AUTHORIZATION_FAILED", "DescribeConfigs", None,
     "not authorized: fleet may not DESCRIBE_CONFIGS cluster 'kafka-cluster' on prod (CLUSTER_AUTHORIZATION_FAILED)"),
])
def test_the_table_names_operation_and_resource(error, request_, name, expected):
    assert str(refused(error, name, "User:fleet", "prod", request_)) == expected


def test_only_authorization_errors_are_refusals():
    assert {e for e, _ in AUTHORIZATION_ERRORS} >= {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
                                                   "CLUSTER_AUTHORIZATION_FAILED"}
    for other in ("NOT_COORDINATOR", "_TIMED_OUT", "GROUP_ID_NOT_FOUND", None, ""):
        assert not authorization_error(other) and refused(other, "g", "User:fleet") is None


def test_hostile_resource_names_stay_on_one_line():
    e = NotAuthorized("describe", "group", "evil\nerror: fine\u202e", "User:fleet", "prod", "GROUP_AUTHORIZATION_FAILED")
    assert "\n" not in str(e) and "'evil\\nerror: fine\\u202e'" in str(e)
    assert e.resource_name == "evil\nerror: fine\u202e"  # the name acted on is kept as it is
    many = [NotAuthorized("DESCRIBE", "group", g, "User:fleet", "prod", "GROUP_AUTHORIZATION_FAILED")
            for g in ("a", "b\nc", "d", "e")]
    line = blind_summary("group", many)
    assert line.startswith("4 group(s) not seen ('a', 'b\\nc', 'd', ...): not authorized: fleet may not DESCRIBE "
                           "group 'a'") and "\n" not in line


class _Err:
    def __init__(self, code, text):
        self._code, self._text = code, text

    def code(self):
        return self._code

    def str(self):
        return self._text


def test_the_error_cb_keeps_the_first_sasl_refusal_and_chains():
    seen = []
    trap = LoginTrap(seen.append)
    trap(_Err(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert trap.reason is None
    trap(_Err(KafkaError._AUTHENTICATION, LIBRDKAFKA_TEXT))
    trap(_Err(KafkaError._AUTHENTICATION, "something later"))
    assert trap.reason == ("Authentication failed during authentication due to invalid credentials with SASL "
                           "mechanism SCRAM-SHA-512")
    assert len(seen) == 3  # the connection's own error_cb still sees everything
    assert login_reason("no prefix at all") == "no prefix at all"


def test_the_error_cb_keeps_the_first_failed_tls_handshake():
    from fleetkit.clients.kafka import tls_failure

    text = ("ssl://127.0.0.1:20392/bootstrap: SSL handshake failed: error:0A0000F4:SSL routines::unexpected "
            "message: client SSL authentication might be required (see ssl.key.location and "
            "ssl.certificate.location and consult the broker logs for more information) (after 6ms in state "
            "SSL_HANDSHAKE)")
    trap = LoginTrap()
    trap(_Err(KafkaError._SSL, text))
    trap(_Err(KafkaError._SSL, "ssl://127.0.0.1:9/bootstrap: SSL handshake failed: later"))
    assert trap.tls == tls_failure(text) == ("127.0.0.1:20392", text[text.index("error:"):text.index(" (after")])
    assert trap.reason is None
    kafka = KafkaCluster("prod", {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL"})
    kafka.trap(_Err(KafkaError._SSL, text))
    with pytest.raises(TlsHandshakeFailed, match=r"^TLS handshake with broker 127.0.0.1:20392 of cluster 'prod' "
                                                 r"failed: error:0A0000F4:SSL routines::unexpected message: "):
        kafka.login_failed()


def test_offset_fetch_on_0_9_needs_read_on_the_group():
    base = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL", "sasl.username": "fleet"}
    new = KafkaCluster("c", base)
    old = KafkaCluster("c", client_config(base, "0.9.0.1"))
    assert new.refused("GROUP_AUTHORIZATION_FAILED", "g", "OffsetFetch").operation == "DESCRIBE"
    assert old.refused("GROUP_AUTHORIZATION_FAILED", "g", "OffsetFetch").operation == "READ"
    assert old.refused("GROUP_AUTHORIZATION_FAILED", "g", "DescribeGroups").operation == "DESCRIBE"


def test_a_caught_refusal_is_raised_naming_user_and_cluster_never_the_password():
    kafka = KafkaCluster("prod", {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL",
                                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "fleet",
                                  "sasl.password": "s3cret-pw"})
    assert kafka.principal == "User:fleet" and kafka.config["error_cb"] is kafka.trap
    kafka.login_failed()  # nothing caught: nothing raised
    kafka.trap(_Err(KafkaError._AUTHENTICATION, LIBRDKAFKA_TEXT))
    with pytest.raises(AuthenticationFailed) as e:
        kafka.login_failed()
    assert str(e.value) == ("authentication failed for fleet on prod: Authentication failed during authentication "
                            "due to invalid credentials with SASL mechanism SCRAM-SHA-512")
    assert "s3cret-pw" not in str(e.value)


def test_blind_is_one_error_line_and_exit_4(capsys):
    from fleetctl.output import BLIND, say_blind

    assert say_blind(["cluster prod: 2 group(s) not seen ('a', 'b'): not authorized: ...", "second\npart"]) == BLIND == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: cluster prod: 2 group(s) not seen")
    assert "\x1b[" not in err  # red only on a terminal
