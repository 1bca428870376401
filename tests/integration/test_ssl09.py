"""Kafka 0.9.0.1 with mutual TLS and ACLs (LabSpec.security = "ssl"), as production 0.9 clusters run.

A 0.9 lab of its own (one broker): clients only on an SSL listener that requires a certificate
signed by the lab CA, brokers among themselves on a PLAINTEXT loopback listener, SimpleAclAuthorizer
with nothing allowed without an ACL, and the ACLs of fleetlab.lab SSL_ACLS for the principals
User:CN=<user>,O=fleetlab. Two more certificates with fewer ACLs, written here the same way:

- `noread`: the `fleet` ACLs without Read on __consumer_offsets;
- `nogroups`: the `fleet` ACLs without Read on groups.

The toolkit's paths on 0.9 (the wire probe, Metadata, the __consumer_offsets reader, the
confluent-kafka admin client with 0.9's fallbacks, the CLI) work as `fleet`; an unauthenticated
client and a client without a certificate are refused; a failed TLS handshake is one line, fast;
a missing ACL is named in one line."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path

import pytest

from fleetkit.clients import wire
from fleetkit.clients.kafka import KafkaCluster, client_config
from fleetkit.clients.wire_security import Security
from fleetkit.collection.groups import collect_cluster
from fleetkit.collection.offsets_topic import read_records
from fleetkit.core.connections import from_env, kafka_config
from fleetkit.core.errors import NotAuthorized, TlsHandshakeFailed
from fleetkit.core.fleet import load_fleet
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.partitioning import partition_for
from fleetlab import tls
from fleetlab.lab_security import SSL_ACLS, SSL_ORG, ssl_principal
from fleetlab.lab_spec import LabSpec
from fleetlab.traffic import produce

from tests.conftest import TEST_PORTS, state_dir, write_fleet_file
from tests.helpers import GIVE_UP, commit_when_led, fresh_lab, not_waited_out, wait_until

REPO = Path(__file__).resolve().parents[2]
SPEC = LabSpec(lab_dir=str(state_dir(".lab-ssl09")), name="ssl09lab", **TEST_PORTS.cluster("ssl09lab"), brokers=1,
               security="ssl")
TOPIC, GROUP = "ssl-orders", "ssl-billing"
pytestmark = pytest.mark.timeout(600)

#: the certificates this module adds: user -> 0.9 ACLs (see the module docstring)
USERS = {
    "noread": [a for a in SSL_ACLS["fleet"] if a != ("Topic", OFFSETS_TOPIC, "Read")],
    "nogroups": [a for a in SSL_ACLS["fleet"] if a[0] != "Group"],
}


@pytest.fixture(scope="module")
def ssl_lab():
    with fresh_lab(SPEC) as lab:
        commit_when_led(lab, TOPIC, 2, {GROUP: {0: 1, 1: 0}})
        produce(SPEC.bootstrap, TOPIC, {0: 5, 1: 3}, kafka_version=SPEC.kafka_version,
                security=SPEC.security_config("admin"))
        for user in USERS:
            tls.make_client_cert(SPEC.tls_dir, SPEC.tls_dir / "ca.pem", SPEC.tls_dir / "ca.key",
                                 {"CN": user, "O": SSL_ORG}, user)
        lab.write_ssl_acls(USERS)

        def acls_arrived() -> bool:  # through /kafka-acl-changes
            return isinstance(kafka_as("nogroups").committed_offsets([GROUP])[GROUP], str)

        wait_until(acls_arrived, 30, "the new ACLs reached the broker")
        yield lab


def conn_env(user: str = "fleet", **change) -> dict[str, str]:
    """The lab's AIRFLOW_CONN_* JSON (the `fleet` certificate), with another certificate or settings
    (a value None removes the key)."""
    env = SPEC.connection_env()
    var = f"AIRFLOW_CONN_{SPEC.kafka_conn_id.upper()}"
    doc = json.loads(env[var])
    doc["extra"].update(SPEC.security_config(user))
    for k, v in change.items():
        k = k.replace("_", ".")
        if v is None:
            doc["extra"].pop(k, None)
        else:
            doc["extra"][k] = v
    env[var] = json.dumps(doc)
    return env


def kafka_as(user: str = "fleet", timeout: float = 15, **change) -> KafkaCluster:
    conn = from_env(SPEC.kafka_conn_id, environ=conn_env(user, **change))
    return KafkaCluster(SPEC.name, client_config(kafka_config(conn), SPEC.kafka_version), timeout=timeout)


def fleetctl(tmp_path, *args, user: str = "fleet", **change) -> subprocess.CompletedProcess:
    fleet = write_fleet_file(SPEC, tmp_path / "fleet.yaml")
    env = dict(os.environ, **conn_env(user, **change))
    cmd = [str(REPO / ".venv" / "bin" / "fleetctl"), *args, "--fleet", str(fleet), "--data-root", str(tmp_path / "d")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    print(f"$ fleetctl {' '.join(args)} (as {user}) -> {out.returncode}\n{out.stdout[-1500:]}{out.stderr[-1500:]}")
    return out


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out.stderr[-3000:]
    return errors[0]


def test_the_principals_are_the_certificate_subjects(ssl_lab):
    cert, key = SPEC.client_cert("fleet")
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert oct((Path(SPEC.broker_dir(0)) / "server.properties").stat().st_mode & 0o777) == "0o600"
    assert kafka_as().principal == ssl_principal("fleet") == "User:CN=fleet,O=fleetlab"
    assert tls.subject_name(cert) == "CN=fleet,O=fleetlab"
    # no password in a command line or a log
    password = SPEC.passwords()["tls:keystore"]
    for f in Path(SPEC.lab_dir).rglob("*"):
        if f.is_file() and f.suffix in (".out", ".log"):
            assert password not in f.read_text(errors="replace"), f


def test_the_login_check_does_not_wait_for_an_api_versions_answer(ssl_lab, caplog):
    """A 0.9 broker leaves ApiVersions unanswered until the client gives up (3 s); the login check
    before the first admin request knows the cluster's version and does not ask."""
    kafka = kafka_as()
    try:
        caplog.set_level(logging.INFO, logger="fleetkit.clients.wire")
        kafka.verify_login()
    finally:
        kafka.close()
    # asked, the broker would leave it unanswered and the client log that it gave up; how long the
    # check takes is a benchmark figure, not an assertion here
    assert "did not answer ApiVersions" not in caplog.text


def test_plaintext_and_certificateless_clients_are_refused(ssl_lab):
    with not_waited_out(), pytest.raises(ConnectionError, match="another security protocol"):
        wire.probe(SPEC.bootstrap, [GROUP], timeout=GIVE_UP, api_versions=False, security=None)
    no_cert = Security.from_config({k: v for k, v in SPEC.security_config("fleet").items()
                                    if k not in ("ssl.certificate.location", "ssl.key.location")}, SPEC.name)
    with pytest.raises(TlsHandshakeFailed, match=f"^TLS handshake with broker {SPEC.bootstrap} of cluster "
                                                 f"'{SPEC.name}' failed: "):
        wire.probe(SPEC.bootstrap, [GROUP], timeout=5, api_versions=False, security=no_cert)


@pytest.mark.parametrize("case", ["no certificate", "wrong CA"])
def test_a_failed_handshake_fails_fast_in_one_line_on_the_confluent_kafka_path(ssl_lab, tmp_path, monkeypatch, case):
    """librdkafka's _SSL error (error_cb) is raised as TlsHandshakeFailed at once; the wire pre-check
    (verify_login) is switched off here, so this is librdkafka alone."""
    if case == "wrong CA":
        other_ca, _ = tls.make_ca(tmp_path / "other", "another CA")
        change = {"ssl_ca_location": str(other_ca)}
    else:
        change = {"ssl_certificate_location": None, "ssl_key_location": None}
    monkeypatch.setattr(KafkaCluster, "verify_login", lambda self: None)
    kafka = kafka_as(timeout=GIVE_UP, **change)
    with not_waited_out(), pytest.raises(TlsHandshakeFailed) as e:
        kafka.list_groups()
    print(e.value)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith(f"TLS handshake with broker {SPEC.bootstrap} of cluster '{SPEC.name}' failed: ")
    assert ("certificate verify failed" if case == "wrong CA" else "unexpected message") in str(e.value)
    monkeypatch.undo()
    out = fleetctl(tmp_path, "stuck", "--cluster", SPEC.name, **change)
    assert out.returncode == 4
    assert one_error_line(out).startswith(f"error: TLS handshake with broker {SPEC.bootstrap} ")


def test_fleet_sees_everything_with_exactly_its_acls(ssl_lab, tmp_path):
    kafka = kafka_as()
    assert TOPIC in kafka.admin.list_topics(timeout=10).topics  # Metadata through librdkafka's 0.9 fallbacks
    answers = kafka.coordinators([GROUP])  # the wire probe: GroupCoordinator + DescribeGroups v0
    assert answers[GROUP].coordinator_id == 0 and answers[GROUP].lookup_error is None
    cluster = load_fleet(write_fleet_file(SPEC, tmp_path / "fleet.yaml")).cluster(SPEC.name)
    # 0.9 never lists a group that only commits: the CLI finds it in __consumer_offsets (below)
    result = collect_cluster(cluster, kafka, None, committed={GROUP})
    print(result.summary())
    assert not result.blind and not result.refusals
    rows = {(r["group"], r["partition"]): r for r in result.rows["offsets_snapshots"]}
    assert {k: (r["committed_offset"], r["log_end_offset"]) for k, r in rows.items()} == {
        (GROUP, 0): (1, 5), (GROUP, 1): (0, 3)}
    # seen, but no history yet (a fresh data root): not judged, never "nothing flagged" with 0
    out = fleetctl(tmp_path, "stuck", "--cluster", SPEC.name, "--json")
    assert out.returncode == 5, out.stderr[-2000:]
    assert "not judged yet: 2 partition(s) of 1 group(s) have too little history" in out.stderr
    doc = json.loads(out.stdout)
    assert doc["groups"] == 1 and doc["partitions"] == 2 and doc["not_seen"] == []
    out = fleetctl(tmp_path, "lag", GROUP, "--cluster", SPEC.name, "--json")
    assert out.returncode == 5, out.stderr[-2000:]
    assert sorted((r["partition"], r["current_offset"]) for r in json.loads(out.stdout)["partitions"]) == [(0, 1), (1, 0)]
    # read-only: no Read on the data topic, so no commit
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        kafka.commit_offsets(GROUP, {(TOPIC, 0): 2})


def test_the_offsets_reader_works_over_mtls(ssl_lab):
    kafka = kafka_as()
    p = partition_for(GROUP)
    for max_records in (None, 1000):  # the wire reader, then the consumer
        res = read_records(SPEC.name, kafka, [p], {}, max_records=max_records)
        commits = {(r["topic"], r["topic_partition"]): r["committed_offset"] for r in res.rows
                   if r["group"] == GROUP and r["topic"] is not None}
        assert commits == {(TOPIC, 0): 1, (TOPIC, 1): 0}, res.rows[:5]


def test_a_missing_acl_is_named_in_one_line(ssl_lab, tmp_path):
    p = partition_for(GROUP)
    with pytest.raises(NotAuthorized) as e:
        read_records(SPEC.name, kafka_as("noread"), [p], {})
    assert str(e.value) == (f"not authorized: CN=noread,O=fleetlab may not READ topic '{OFFSETS_TOPIC}' on "
                            f"{SPEC.name} (TOPIC_AUTHORIZATION_FAILED)")
    # OffsetFetch on 0.9 needs Read on the group (later brokers: Describe)
    out = fleetctl(tmp_path, "lag", GROUP, "--cluster", SPEC.name, user="nogroups")
    assert out.returncode == 4
    line = one_error_line(out)
    assert "CN=nogroups,O=fleetlab may not " in line and f"group '{GROUP}' on {SPEC.name}" in line
    assert "(GROUP_AUTHORIZATION_FAILED)" in line
    kafka = kafka_as("nogroups")
    assert str(kafka.refused(kafka.committed_offsets([GROUP])[GROUP], GROUP, "OffsetFetch")) == (
        f"not authorized: CN=nogroups,O=fleetlab may not READ group '{GROUP}' on {SPEC.name} "
        "(GROUP_AUTHORIZATION_FAILED)")
