"""On a secured cluster a failure says what it could not do, fast, and the toolkit never reports
health it did not see.

A secured lab of its own, once per authorizer: Kafka 4.3.1 in KRaft mode (StandardAuthorizer) and
Kafka 3.9.2 in ZooKeeper mode (AclAuthorizer), each SASL_SSL SCRAM-SHA-512 with nothing allowed
without an ACL (fleetlab.lab SECURED_ACLS), plus users with fewer ACLs, created here by the lab's
admin (alter_user_scram_credentials, create_acls):

- `nogroups`: DESCRIBE on the cluster and on every topic, READ on __consumer_offsets, nothing on
  groups (ListGroups lists the groups, DescribeGroups / OffsetFetch refuse each one);
- `noread`: the read-only `fleet` user's ACLs without READ on __consumer_offsets;
- `noconfigs`: the `fleet` user's ACLs without DESCRIBE_CONFIGS (the cleaner settings);
- `noacls`: a login and no ACL at all.

A wrong password (or an unknown user) must fail in well under 10 s with "authentication failed for
<user> on <cluster>: <the broker's reason>" on the confluent-kafka path, on the wire path and in the
CLI (exit 4); a missing ACL names the principal, the operation and the resource in one line, and
the CLI exits 4 (blind), never 0."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from fleetkit.clients.kafka import KafkaCluster, client_config
from fleetkit.collection.groups import collect_cluster
from fleetkit.collection.offsets_topic import read_records
from fleetkit.core.connections import from_env, kafka_config
from fleetkit.core.errors import AuthenticationFailed, NotAuthorized
from fleetkit.core.fleet import load_fleet
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.partitioning import partition_for
from fleetlab.lab import Lab, LabSpec

from tests.conftest import TEST_PORTS, state_dir, write_fleet_file
from tests.helpers import GIVE_UP, commit_when_led, fresh_lab, not_waited_out, wait_until

REPO = Path(__file__).resolve().parents[2]
#: one lab per authorizer, the same name, folder and ports (one runs at a time: the module's tests
#: run whole on one, then on the other); SPEC is the one running
SPECS = {v: LabSpec(lab_dir=str(state_dir(".lab-secure-errors")), name="secerrlab", **TEST_PORTS.cluster("secerrlab"),
                    brokers=1, kafka_version=v, security="sasl_ssl") for v in ("4.3.1", "3.9.2")}
SPEC = SPECS["4.3.1"]
TOPIC, GROUP = "errors-orders", "errors-billing"
#: a group name that is hostile input: it must reach a terminal escaped, on one line
HOSTILE = "evil\nerror: all good\u202e"
WRONG = "not-the-password-for-errors-17"
pytestmark = pytest.mark.timeout(900)

#: the users this module creates: name -> [(resource type, literal name, operation)]
USERS = {
    "nogroups": [("cluster", "kafka-cluster", "DESCRIBE"), ("topic", "*", "DESCRIBE"),
                 ("topic", OFFSETS_TOPIC, "READ")],
    "noread": [("cluster", "kafka-cluster", "DESCRIBE"), ("cluster", "kafka-cluster", "DESCRIBE_CONFIGS"),
               ("group", "*", "DESCRIBE"), ("topic", "*", "DESCRIBE"), ("topic", "*", "DESCRIBE_CONFIGS")],
    "noconfigs": [("cluster", "kafka-cluster", "DESCRIBE"), ("group", "*", "DESCRIBE"), ("topic", "*", "DESCRIBE"),
                  ("topic", OFFSETS_TOPIC, "READ")],
    "noacls": [],
}
PASSWORDS = {u: secrets.token_urlsafe(16) for u in USERS}


def _add_users(lab: Lab) -> None:
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    admin = lab.admin()
    for fut in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), p.encode())
            for u, p in PASSWORDS.items()]).values():
        fut.result(timeout=30)
    types = {"cluster": ResourceType.BROKER, "group": ResourceType.GROUP, "topic": ResourceType.TOPIC}
    acls = [AclBinding(types[rtype], name, ResourcePatternType.LITERAL, f"User:{u}", "*",
                       getattr(AclOperation, op), AclPermissionType.ALLOW)
            for u, rows in USERS.items() for rtype, name, op in rows]
    for fut in admin.create_acls(acls).values():
        fut.result(timeout=30)


@pytest.fixture(scope="module", params=list(SPECS), ids=lambda v: f"kafka-{v}")
def secure_lab(request):
    global SPEC
    SPEC = SPECS[request.param]
    with fresh_lab(SPEC) as lab:
        # simple commits by the admin user (the lab's committer)
        commit_when_led(lab, TOPIC, 2, {group: {p: 0 for p in range(2)} for group in (GROUP, HOSTILE)})
        _add_users(lab)

        def users_answer() -> bool:  # credentials and ACLs reach the broker through the metadata log
            k = kafka_as("noread")
            try:
                return k.describe_groups([GROUP])[GROUP].error is None
            finally:
                k.close()

        wait_until(users_answer, 30, "the new users logged in", retry_on=(AuthenticationFailed,))
        yield lab


def conn_env(user: str | None = None, password: str | None = None) -> dict[str, str]:
    """The secured lab's AIRFLOW_CONN_* JSON (the read-only `fleet` user), with another login."""
    env = SPEC.connection_env()
    var = f"AIRFLOW_CONN_{SPEC.kafka_conn_id.upper()}"
    doc = json.loads(env[var])
    if user is not None:
        doc["extra"]["sasl.username"] = user
        doc["extra"]["sasl.password"] = PASSWORDS.get(user, password)
    if password is not None:
        doc["extra"]["sasl.password"] = password
    env[var] = json.dumps(doc)
    return env


def kafka_as(user: str | None = None, password: str | None = None, timeout: float = 15) -> KafkaCluster:
    """The cluster as the toolkit opens it (the connection's JSON, its librdkafka config)."""
    conn = from_env(SPEC.kafka_conn_id, environ=conn_env(user, password))
    return KafkaCluster(SPEC.name, client_config(kafka_config(conn), SPEC.kafka_version), timeout=timeout)


def fleetctl(tmp_path, *args, user: str | None = None, password: str | None = None,
             data: bool = True) -> tuple[subprocess.CompletedProcess, float]:
    fleet = write_fleet_file(SPEC, tmp_path / "fleet.yaml")
    env = dict(os.environ, **conn_env(user, password))
    cmd = [str(REPO / ".venv" / "bin" / "fleetctl"), *args, "--fleet", str(fleet)]
    if data:
        cmd += ["--data-root", str(tmp_path / "data")]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    seconds = time.monotonic() - t0
    print(f"$ fleetctl {' '.join(args)} (as {user or 'fleet'}) -> {out.returncode} in {seconds:.1f}s\n"
          f"{out.stdout[-1500:]}{out.stderr[-1500:]}")
    return out, seconds


def one_error_line(out: subprocess.CompletedProcess) -> str:
    """The single "error: ..." line of stderr (no traceback, no second error line)."""
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out.stderr[-3000:]
    return errors[0]


def no_secret(text: str) -> None:
    assert WRONG not in text
    for p in list(PASSWORDS.values()) + list(SPEC.passwords().values()):
        assert p not in text


# -- a refused login ---------------------------------------------------------------------------
def test_wrong_password_on_the_confluent_kafka_path(secure_lab, monkeypatch):
    """The admin client and a consumer alone (the wire login that precedes admin requests is
    switched off here): librdkafka's _AUTHENTICATION error, caught by the error_cb, is raised."""
    monkeypatch.setattr(KafkaCluster, "verify_login", lambda self: None)
    for user in ("fleet", "nobody-such"):
        kafka = kafka_as(user, WRONG, timeout=GIVE_UP)
        with not_waited_out(), pytest.raises(AuthenticationFailed) as e:
            kafka.list_groups()
        print(f"admin client: {e.value}")
        assert str(e.value).startswith(f"authentication failed for {user} on {SPEC.name}: ")
        assert "invalid credentials" in str(e.value) and "\n" not in str(e.value)  # the broker's reason
        no_secret(str(e.value) + repr(e.value))
    kafka = kafka_as("fleet", WRONG, timeout=GIVE_UP)
    with not_waited_out(), pytest.raises(AuthenticationFailed,
                                         match=f"^authentication failed for fleet on {SPEC.name}: "):
        kafka.record_at(TOPIC, 0, 0)  # a Consumer, no admin client


def test_wrong_password_on_the_wire_path(secure_lab):
    kafka = kafka_as("fleet", WRONG, timeout=GIVE_UP)
    with not_waited_out(), pytest.raises(AuthenticationFailed) as e:
        kafka.leader_epochs([TOPIC])
    print(f"wire: {e.value}")
    assert str(e.value).startswith(f"authentication failed for fleet on {SPEC.name}: ")
    no_secret(str(e.value))


@pytest.mark.parametrize("command", [("stuck", "--cluster", SPEC.name), ("lag", "--all", "--cluster", SPEC.name),
                                     ("offsets", "dump", "--cluster", SPEC.name, "--partition", "0"),
                                     ("offsets", "health", "--cluster", SPEC.name)])
def test_wrong_password_in_the_cli_exits_4_in_one_line(secure_lab, tmp_path, command):
    out, seconds = fleetctl(tmp_path, *command, "--timeout", str(GIVE_UP), password=WRONG, data=command[1] != "dump")
    line = one_error_line(out)
    assert out.returncode == 4
    assert seconds < GIVE_UP, f"{seconds:.1f}s: the refused login was waited out, not reported"
    assert line.startswith(f"error: authentication failed for fleet on {SPEC.name}: ")
    no_secret(out.stdout + out.stderr)


# -- missing ACLs ----------------------------------------------------------------------------
GROUP_REFUSED = f"nogroups may not DESCRIBE group '{GROUP}' on {SPEC.name} (GROUP_AUTHORIZATION_FAILED)"


def test_groups_it_may_not_describe_are_named_by_the_collection(secure_lab):
    cluster = load_fleet(write_fleet_file(SPEC, Path(SPEC.lab_dir) / "fleet.yaml")).cluster(SPEC.name)
    kafka = kafka_as("nogroups")
    result = collect_cluster(cluster, kafka, None)
    print(result.summary(), result.blind_lines())
    assert result.blind and not result.rows["offsets_snapshots"]
    assert set(result.unseen_groups) == {GROUP, HOSTILE}
    refusal = next(r for r in result.refusals if r.resource_name == GROUP)
    assert (refusal.operation, refusal.resource_type, refusal.principal) == ("DESCRIBE", "group", "User:nogroups")
    assert str(refusal) == f"not authorized: {GROUP_REFUSED}"
    assert all("\n" not in line for line in result.blind_lines())


@pytest.mark.parametrize("command", [("stuck", "--cluster", SPEC.name), ("lag", "--all", "--cluster", SPEC.name),
                                     ("lag", GROUP, "--cluster", SPEC.name)])
def test_without_group_acls_the_cli_is_blind_not_ok(secure_lab, tmp_path, command):
    out, _ = fleetctl(tmp_path, *command, user="nogroups")
    line = one_error_line(out)
    assert out.returncode == 4
    assert "nothing flagged" not in out.stdout
    assert "may not DESCRIBE group" in line and "(GROUP_AUTHORIZATION_FAILED)" in line
    if command[1] != GROUP:
        assert "2 group(s) not seen" in line and f"'{GROUP}'" in line
        assert "'evil\\nerror: all good\\u202e'" in line  # the hostile name, escaped, on the same line
    no_secret(out.stdout + out.stderr)


def test_collect_without_group_acls_exits_non_zero_naming_the_groups(secure_lab, tmp_path):
    out, _ = fleetctl(tmp_path, "collect", "--cluster", SPEC.name, "--out", str(tmp_path / "data"), user="nogroups",
                      data=False)
    line = one_error_line(out)
    assert out.returncode == 4
    assert "offsets_snapshots=0" in out.stdout
    assert "2 group(s) not seen" in line and GROUP_REFUSED in line


def test_coordinator_who_without_group_acls_is_blind(secure_lab, tmp_path):
    out, _ = fleetctl(tmp_path, "coordinator", "who", GROUP, "--cluster", SPEC.name, user="nogroups", data=False)
    assert out.returncode == 4 and GROUP_REFUSED in one_error_line(out)


def test_the_offsets_reader_names_read_on_the_offsets_topic(secure_lab, tmp_path):
    kafka = kafka_as("noread", timeout=GIVE_UP)
    p = partition_for(GROUP)
    for max_records in (None, 1000):  # the wire reader, then the consumer (commit_index's)
        with not_waited_out(), pytest.raises(NotAuthorized) as e:
            read_records(SPEC.name, kafka, [p], {}, max_records=max_records)
        print(e.value)
        assert (e.value.operation, e.value.resource) == ("READ", f"topic {OFFSETS_TOPIC}")
        assert str(e.value) == (f"not authorized: noread may not READ topic '{OFFSETS_TOPIC}' on {SPEC.name} "
                                "(TOPIC_AUTHORIZATION_FAILED)")
    out, _ = fleetctl(tmp_path, "offsets", "dump", "--cluster", SPEC.name, "--partition", str(p), user="noread",
                      data=False)
    assert out.returncode == 4
    assert one_error_line(out) == f"error: {e.value}"
    # stuck reads the commit rhythm from __consumer_offsets: blind, naming READ on the topic
    out, _ = fleetctl(tmp_path, "stuck", "--cluster", SPEC.name, user="noread")
    assert out.returncode == 4 and f"may not READ topic '{OFFSETS_TOPIC}'" in one_error_line(out)


def test_offsets_health_without_describe_configs_is_blind(secure_lab, tmp_path):
    out, seconds = fleetctl(tmp_path, "offsets", "health", "--cluster", SPEC.name, user="noconfigs")
    assert out.returncode == 4
    assert one_error_line(out) == (f"error: not authorized: noconfigs may not DESCRIBE_CONFIGS cluster 'kafka-cluster' "
                                   f"on {SPEC.name} (CLUSTER_AUTHORIZATION_FAILED)")


def test_coordinator_who_with_a_wrong_password(secure_lab, tmp_path):
    out, _ = fleetctl(tmp_path, "coordinator", "who", GROUP, "--cluster", SPEC.name, password=WRONG, data=False)
    assert out.returncode == 4
    assert one_error_line(out).startswith(f"error: authentication failed for fleet on {SPEC.name}: ")
    no_secret(out.stdout + out.stderr)


def test_a_login_without_any_acl_is_blind_not_empty(secure_lab, tmp_path):
    """ListGroups answers an empty list (no error) to a principal without Describe on the cluster,
    and Metadata hides __consumer_offsets: neither may read as "no groups" / "no topic yet"."""
    out, _ = fleetctl(tmp_path, "lag", "--all", "--cluster", SPEC.name, user="noacls")
    assert out.returncode == 4
    assert f"noacls may not DESCRIBE cluster 'kafka-cluster' on {SPEC.name}" in one_error_line(out)
    out, _ = fleetctl(tmp_path, "coordinator", "who", GROUP, "--cluster", SPEC.name, user="noacls", data=False)
    assert out.returncode == 4 and "no __consumer_offsets topic yet" not in out.stdout + out.stderr
    refused_topic = (f"error: not authorized: noacls may not DESCRIBE topic '{OFFSETS_TOPIC}' on {SPEC.name} "
                     "(TOPIC_AUTHORIZATION_FAILED)")
    if SPEC.kraft:
        assert one_error_line(out) == refused_topic
    else:  # ZooKeeper mode: the partition's leader is read from ZooKeeper, the group is what Kafka refuses
        assert one_error_line(out) == (f"error: cluster {SPEC.name}: 1 group(s) not seen ('{GROUP}'): not authorized: "
                                       f"noacls may not DESCRIBE group '{GROUP}' on {SPEC.name} "
                                       "(GROUP_AUTHORIZATION_FAILED)")
    # ListOffsets of a topic it may not describe (librdkafka: "_NOENT"), then no Fetch at all
    out, _ = fleetctl(tmp_path, "offsets", "dump", "--cluster", SPEC.name, "--partition", str(partition_for(GROUP)),
                      user="noacls", data=False)
    assert out.returncode == 4 and one_error_line(out) == refused_topic


# -- everything granted ------------------------------------------------------------------------
def test_the_fleet_user_sees_everything(secure_lab, tmp_path):
    out, _ = fleetctl(tmp_path, "stuck", "--cluster", SPEC.name, "--json")
    assert out.returncode in (0, 5), out.stderr[-2000:]  # 5: seen, partitions with lag not judged yet
    assert (out.returncode == 5) == ("not judged yet: " in out.stderr)
    doc = json.loads(out.stdout)
    assert doc["groups"] == 2 and doc["partitions"] == 4 and doc["not_seen"] == []
    out, _ = fleetctl(tmp_path, "lag", GROUP, "--cluster", SPEC.name, "--json")
    assert out.returncode in (0, 5), out.stderr[-2000:]
    parts = json.loads(out.stdout)["partitions"]
    assert sorted((r["partition"], r["current_offset"]) for r in parts) == [(0, 0), (1, 0)]
    out, _ = fleetctl(tmp_path, "collect", "--cluster", SPEC.name, "--out", str(tmp_path / "data"), data=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "offsets_snapshots=4" in out.stdout and "not seen" not in out.stdout + out.stderr
    out, _ = fleetctl(tmp_path, "coordinator", "who", GROUP, "--cluster", SPEC.name, data=False)
    assert out.returncode == 0 and "verdict=OK" in out.stdout
