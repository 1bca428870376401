"""SASL/OAUTHBEARER on the secured lab clusters (3.9 in ZooKeeper mode, 4.3 in KRaft mode), as a
team whose brokers validate their identity provider's tokens connects.

The brokers check each token's signature against the lab issuer's JSON Web Key Set, its issuer,
audience and expiry (fleetlab.oauth; Kafka's OAuthBearerValidatorCallbackHandler); the token's
subject is the principal, so `fleet`'s ACLs apply. The connection is the README's OAUTHBEARER
connection: librdkafka settings plus `"oauth_cb": "<dotted path>"`, which the apache-kafka
provider resolves only when listed in [apache_kafka] callback_allowlist. The toolkit's own
protocol client cannot log in with OAUTHBEARER, so these paths run on confluent-kafka alone.

- the hook's cluster lists and describes groups and reads their committed offsets;
- `fleetctl lag` reads and judges the group through the same connection (an OAUTHBEARER connection always resolves
  through Airflow's hook, never the fast environment path);
- a token signed by another key is refused in seconds, in one line naming the principal;
- a callback not in the allowlist is refused before any connection, naming the setting.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fleetkit.core.errors import AuthenticationFailed
from fleetctl.output import FLAGGED
from fleetlab import oauth

from tests.conftest import write_fleet_file
from tests.helpers import GIVE_UP, commit_when_led, not_waited_out

REPO = Path(__file__).resolve().parents[2]
ALLOWLIST = "AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST"
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(params=["lab39test", "lab43test"], ids=["kafka-3.9", "kafka-4.3"])
def oauth_lab(request, lab_fleet):
    handle = lab_fleet(request.param)
    topic, group = f"oauth-orders-{handle.spec.name}", f"oauth-billing-{handle.spec.name}"
    commit_when_led(handle.lab, topic, 2, {group: {0: 3, 1: 5}})
    return handle, topic, group


def oauth_conn(spec, monkeypatch, user: str = "fleet", issuer_key: Path | None = None) -> str:
    """An OAUTHBEARER connection for `spec` in the environment (the callback allowed); its id."""
    conn_id = f"{spec.conn_prefix}_kafka_oauth"
    extra = {"bootstrap.servers": spec.bootstrap, **spec.oauth_config(user)}
    if issuer_key is not None:
        extra["sasl.oauthbearer.config"] = f"principal={user} issuer_key={issuer_key}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kafka", "extra": extra}))
    monkeypatch.setenv(ALLOWLIST, "fleetlab.oauth.token")
    return conn_id


def hook_cluster(spec, conn_id: str, timeout: float = 15):
    from fleet_airflow.hooks.kafka_cluster import KafkaClusterHook

    return KafkaClusterHook(conn_id, cluster_name=spec.name, kafka_version=spec.kafka_version, timeout=timeout).get_conn


def test_the_fleet_principal_reads_groups_and_offsets_with_a_token(oauth_lab, monkeypatch):
    handle, topic, group = oauth_lab
    kafka = hook_cluster(handle.spec, oauth_conn(handle.spec, monkeypatch))
    try:
        assert kafka.principal == "User:fleet"
        assert group in {name for name, _protocol in kafka.list_groups()}
        described = kafka.describe_groups([group])[group]
        assert described.error is None, described.error
        assert kafka.committed_offsets([group])[group] == {(topic, 0): 3, (topic, 1): 5}
    finally:
        kafka.close()


def test_fleetctl_lag_answers_through_the_oauthbearer_connection(oauth_lab, monkeypatch, tmp_path):
    handle, topic, group = oauth_lab
    conn_id = oauth_conn(handle.spec, monkeypatch)
    fleet = write_fleet_file(handle.spec, tmp_path / "fleet.yaml", kafka_conn_id=conn_id)
    out = subprocess.run([str(REPO / ".venv" / "bin" / "fleetctl"), "lag", "--cluster", handle.spec.name,
                          group, "--fleet", str(fleet), "--data-root", str(tmp_path / "data")],
                         capture_output=True, text=True, env=dict(os.environ), timeout=300)
    print(out.stdout[-2000:], out.stderr[-2000:])
    # the commits (3 and 5) lie past the empty log's end: read through the token, judged, flagged
    assert out.returncode == FLAGGED, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith(group)]
    assert sorted((r[2], r[3], r[4], r[-1]) for r in rows) == [("0", "3", "0", "OUT_OF_RANGE"),
                                                             ("1", "5", "0", "OUT_OF_RANGE")]


def test_a_token_signed_by_another_key_is_refused_fast(oauth_lab, monkeypatch, tmp_path):
    handle, _topic, group = oauth_lab
    forged, _jwks = oauth.ensure_issuer(tmp_path / "forger")
    kafka = hook_cluster(handle.spec, oauth_conn(handle.spec, monkeypatch, issuer_key=forged), timeout=GIVE_UP)
    try:
        with not_waited_out(), pytest.raises(AuthenticationFailed) as e:
            kafka.describe_groups([group])
    finally:
        kafka.close()
    print(e.value)
    assert str(e.value).startswith(f"authentication failed for User:fleet on {handle.spec.name}: ")
    assert "\n" not in str(e.value)


def test_a_callback_outside_the_allowlist_is_refused_naming_it(oauth_lab, monkeypatch):
    handle, _topic, _group = oauth_lab
    conn_id = oauth_conn(handle.spec, monkeypatch)
    monkeypatch.setenv(ALLOWLIST, "some.other.callback")
    with pytest.raises(ValueError, match=r"oauth_cb='fleetlab\.oauth\.token'.*callback_allowlist"):
        hook_cluster(handle.spec, conn_id)
