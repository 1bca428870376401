"""The toolkit on a secured cluster: Kafka 4.3.1 (KRaft) with a SASL_SSL listener (SCRAM-SHA-512,
a lab CA), StandardAuthorizer and no access without an ACL (fleetlab.lab SECURED_ACLS).

The toolkit logs in as the lab's read-only `fleet` user through its normal connection path (the
AIRFLOW_CONN_* JSON of connection_env(), read by fleetkit.core.connections): its own protocol
client (Metadata with leader epochs, FindCoordinator / DescribeGroups, the __consumer_offsets
Fetch reader) works there; a wrong password, a missing login, an untrusted CA and a missing ACL
each fail fast with one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from fleetkit.clients import wire, wire_logs
from fleetkit.clients.protocol import transport
from fleetkit.clients.kafka import KafkaCluster, client_config
from fleetkit.clients.wire_security import Security
from fleetkit.collection.offsets_topic import read_records
from fleetkit.core.connections import from_env, kafka_config
from fleetkit.core.errors import AuthenticationFailed, NotAuthorized, TlsHandshakeFailed
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.partitioning import partition_for
from fleetlab import tls
from fleetlab.lab import LabSpec

from tests.conftest import TEST_PORTS, state_dir
from tests.helpers import GIVE_UP, commit_when_led, fresh_lab, not_waited_out

REPO = Path(__file__).resolve().parents[2]
SPEC = LabSpec(lab_dir=str(state_dir(".lab-secure")), name="securelab", **TEST_PORTS.cluster("securelab"), brokers=1,
               kafka_version="4.3.1", security="sasl_ssl")
TOPIC, GROUP = "secured-orders", "secured-billing"
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def secure_lab():
    with fresh_lab(SPEC) as lab:
        # a simple commit by the admin user (the lab's producer / committer)
        commit_when_led(lab, TOPIC, 3, {GROUP: {p: 10 + p for p in range(3)}})
        yield lab


def fleet_kafka(timeout: float = 15, **override) -> KafkaCluster:
    """The cluster as the toolkit opens it: the connection's JSON, its librdkafka config."""
    conn = from_env(SPEC.kafka_conn_id, environ=SPEC.connection_env())
    cfg = client_config(dict(kafka_config(conn), **override), SPEC.kafka_version)
    return KafkaCluster(SPEC.name, cfg, timeout=timeout)


def test_connection_carries_the_security_settings(secure_lab):
    cfg = fleet_kafka().config
    assert cfg["security.protocol"] == "SASL_SSL" and cfg["sasl.mechanism"] == "SCRAM-SHA-512"
    assert cfg["sasl.username"] == "fleet" and cfg["ssl.ca.location"].endswith("ca.pem")
    assert wire.supported(cfg)
    assert (Path(SPEC.secrets_file).stat().st_mode & 0o777) == 0o600


def test_metadata_with_leader_epochs_on_sasl_ssl(secure_lab):
    got = fleet_kafka().leader_epochs([TOPIC, OFFSETS_TOPIC])
    assert got is not None
    parts, errors = got
    assert not errors
    mine = [p for p in parts if p.topic == TOPIC]
    assert len(mine) == 3 and all(p.leader == 0 and p.leader_epoch is not None and p.leader_epoch >= 0 for p in mine)


def test_coordinator_lookup_and_describe_of_a_committed_group(secure_lab):
    kafka = fleet_kafka()
    answers = kafka.coordinators([GROUP])
    assert answers is not None
    a = answers[GROUP]
    assert a.error is None and a.coordinator_id == 0 and a.coordinator == f"127.0.0.1:{SPEC.broker_port(0)}"
    assert a.state == "Empty"


def test_offsets_topic_reader_reads_the_commits_on_the_wire(secure_lab):
    kafka = fleet_kafka()
    p = partition_for(GROUP)
    t0 = time.monotonic()
    res = read_records(SPEC.name, kafka, [p], {})
    print(f"read {len(res.rows)} rows in {time.monotonic() - t0:.2f}s, reader {res.reader}")
    assert res.reader == "wire" and not res.problems
    got = {(r["topic"], r["topic_partition"]): r["committed_offset"] for r in res.rows
           if r["group"] == GROUP and r["topic"] == TOPIC}
    assert got == {(TOPIC, q): 10 + q for q in range(3)}


def test_log_dirs_and_quorum_on_sasl_ssl(secure_lab):
    kafka = fleet_kafka()
    found, problems = wire_logs.log_dir_sizes(kafka.bootstrap, {OFFSETS_TOPIC: [0, 1]}, 10,
                                              security=kafka.wire_security)
    assert not problems and sorted(r.partition for r in found if r.topic == OFFSETS_TOPIC) == [0, 1]
    q = wire_logs.describe_quorum(kafka.bootstrap, 10, security=kafka.wire_security)
    assert q.leader_id == 0 and [v[0] for v in q.voters] == [0]


def test_wrong_password_fails_fast_naming_the_user(secure_lab):
    wrong = "not-the-password-42"
    kafka = fleet_kafka(GIVE_UP, **{"sasl.password": wrong})
    with not_waited_out(), pytest.raises(AuthenticationFailed) as e:
        kafka.leader_epochs([TOPIC])
    print(e.value)
    assert str(e.value).startswith("authentication failed for fleet on securelab: ")
    assert wrong not in str(e.value) and wrong not in repr(e.value)
    assert SPEC.passwords()["fleet"] not in str(e.value)
    # the confluent-kafka side too: the first admin request logs in on the wire first
    with not_waited_out(), pytest.raises(AuthenticationFailed, match="^authentication failed for fleet on securelab: "):
        fleet_kafka(GIVE_UP, **{"sasl.password": wrong}).log_offsets([(TOPIC, 0)])


def test_unauthenticated_clients_are_refused(secure_lab):
    bootstrap = SPEC.bootstrap
    # plaintext to the SASL_SSL port: no Kafka answer at all
    assert transport.broker_versions(bootstrap, timeout=3) is None
    # TLS without a login: the broker answers nothing but ApiVersions and the SASL handshake
    tls_only = Security.from_config({"security.protocol": "SSL", "ssl.ca.location": str(SPEC.tls_dir / "ca.pem")})
    with pytest.raises(ConnectionError):
        wire.partition_leaders(bootstrap, [TOPIC], timeout=5, security=tls_only)


@pytest.fixture(scope="module")
def outsider(secure_lab) -> str:
    """A user `outsider` with Describe on the cluster and on topics only; returns its password."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    admin = secure_lab.admin()
    password = "outsider-password-7"
    for fut in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "outsider", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())]).values():
        fut.result(timeout=30)
    acls = [AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:outsider", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:outsider", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)]
    for fut in admin.create_acls(acls).values():
        fut.result(timeout=30)
    time.sleep(1)  # ACLs and credentials reach the broker through the metadata log
    return password


def test_a_user_without_read_on_the_offsets_topic_is_named(outsider):
    password = outsider
    kafka = fleet_kafka(**{"sasl.username": "outsider", "sasl.password": password})
    with pytest.raises(NotAuthorized) as e:
        read_records(SPEC.name, kafka, [partition_for(GROUP)], {})
    print(e.value)
    assert e.value.operation == "READ" and e.value.resource == f"topic {OFFSETS_TOPIC}"
    assert e.value.principal == "User:outsider"
    assert "\n" not in str(e.value) and password not in str(e.value)


def test_record_timestamps_without_read_on_the_topic_name_the_missing_acl(outsider, caplog):
    kafka = fleet_kafka(**{"sasl.username": "outsider", "sasl.password": outsider})
    with caplog.at_level("WARNING", logger="fleetkit.clients.kafka"):
        got = kafka.record_timestamps({(TOPIC, 0): 0}, timeout=5)
    assert got == {(TOPIC, 0): None}
    warned = [r.getMessage() for r in caplog.records if "record timestamps" in r.getMessage()]
    assert warned == [f"cluster securelab: record timestamps of topic {TOPIC} not read: not authorized: outsider may "
                      f"not READ topic '{TOPIC}' on securelab (TOPIC_AUTHORIZATION_FAILED)"]


def test_an_untrusted_ca_is_a_clear_tls_error(secure_lab, tmp_path):
    other_ca, _ = tls.make_ca(tmp_path, "some other CA")
    kafka = fleet_kafka(GIVE_UP, **{"ssl.ca.location": str(other_ca)})
    with not_waited_out(), pytest.raises(TlsHandshakeFailed) as e:
        kafka.leader_epochs([TOPIC])
    print(e.value)
    assert f"127.0.0.1:{SPEC.broker_port(0)}" in str(e.value) and "certificate verify failed" in str(e.value)


def fleetctl_lag(tmp_path, password: str | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """`fleetctl lag GROUP` as an operator runs it: the fleet file and the AIRFLOW_CONN_* JSON of the
    secured lab in the environment (the read-only fleet user)."""
    from tests.conftest import write_fleet_file

    fleet = write_fleet_file(SPEC, tmp_path / "fleet.yaml")
    env = dict(os.environ, **SPEC.connection_env())
    if password is not None:
        var = f"AIRFLOW_CONN_{SPEC.kafka_conn_id.upper()}"
        doc = json.loads(env[var])
        doc["extra"]["sasl.password"] = password
        env[var] = json.dumps(doc)
    t0 = time.monotonic()
    out = subprocess.run([str(REPO / ".venv" / "bin" / "fleetctl"), "lag", GROUP, "--cluster", SPEC.name,
                          "--fleet", str(fleet), "--data-root", str(tmp_path / "data"), "--json",
                          "--timeout", str(GIVE_UP)],
                         capture_output=True, text=True, env=env, timeout=120)
    print(f"fleetctl lag -> {out.returncode} in {time.monotonic() - t0:.1f}s\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out, time.monotonic() - t0


def test_fleetctl_reads_the_secured_cluster(secure_lab, tmp_path):
    out, _ = fleetctl_lag(tmp_path)
    assert SPEC.passwords()["fleet"] not in out.stdout + out.stderr
    assert out.returncode not in (2, 4), out.stderr[-2000:]  # 2: an error, 4: the cluster unreachable
    json.loads(out.stdout)
    # the commits read now (offsets 10, 11, 12 above an empty log: the verdict says OUT_OF_RANGE)
    assert all(f'"current_offset": {10 + p}' in out.stdout for p in range(3)) and '"group_state": "Empty"' in out.stdout


def test_fleetctl_with_a_wrong_password_says_so_in_one_line(secure_lab, tmp_path):
    wrong = "wrong-password-for-fleetctl"
    out, seconds = fleetctl_lag(tmp_path, wrong)
    assert out.returncode == 4  # 4: the cluster could not be seen (a refused login)
    assert seconds < GIVE_UP, f"{seconds:.1f}s: the refused login was waited out, not reported"
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [errors[0]] and errors[0].startswith("error: authentication failed for fleet on securelab: ")
    assert "Traceback" not in out.stderr and wrong not in out.stderr + out.stdout


def test_sasl_plain_serves_every_path_of_the_fleet_user(secure_lab, tmp_path):
    """SASL/PLAIN over TLS, the README's PLAIN connection: the toolkit's own protocol client
    (Metadata with leader epochs, the __consumer_offsets reader) and confluent-kafka (committed
    offsets) log in as `fleet`, whose ACLs apply; a wrong password is one line, in seconds."""
    plain = SPEC.security_config("fleet", mechanism="PLAIN")
    assert plain["sasl.mechanism"] == "PLAIN" and plain["security.protocol"] == "SASL_SSL"
    kafka = fleet_kafka(**plain)
    assert kafka.principal == "User:fleet" and kafka.wire_security.mechanism == "PLAIN"
    parts, errors = kafka.leader_epochs([TOPIC])
    assert not errors and sorted(p.partition for p in parts) == [0, 1, 2]
    res = read_records(SPEC.name, kafka, [partition_for(GROUP)], {})
    assert res.reader == "wire" and not res.problems
    assert {r["topic_partition"]: r["committed_offset"] for r in res.rows
            if r["group"] == GROUP and r["topic"] == TOPIC} == {q: 10 + q for q in range(3)}
    assert kafka.committed_offsets([GROUP])[GROUP] == {(TOPIC, q): 10 + q for q in range(3)}
    wrong = "not-the-plain-password-7"
    for step in (lambda k: k.leader_epochs([TOPIC]), lambda k: k.log_offsets([(TOPIC, 0)])):
        with not_waited_out(), pytest.raises(AuthenticationFailed) as e:
            step(fleet_kafka(GIVE_UP, **dict(plain, **{"sasl.password": wrong})))
        assert str(e.value).startswith("authentication failed for fleet on securelab: ") and "\n" not in str(e.value)
        assert wrong not in str(e.value) and SPEC.passwords()["fleet"] not in str(e.value)


def test_no_password_in_the_brokers_logs_or_readable_files(secure_lab):
    """The PLAIN users' passwords are in server.properties (PlainLoginModule's options): that file
    is private to its owner, and the broker's logs (which print its settings at start) hold none."""
    props = SPEC.broker_dir(0) / "server.properties"
    assert (props.stat().st_mode & 0o777) == 0o600
    assert SPEC.passwords()["fleet"] in props.read_text()  # the check below can fail
    logs = list((SPEC.broker_dir(0) / "logs").glob("*"))
    assert any(p.name == "server.log" for p in logs)
    for path in logs:
        text = path.read_bytes()
        for user, password in SPEC.passwords().items():
            assert password.encode() not in text, f"{path} holds the password of {user}"
