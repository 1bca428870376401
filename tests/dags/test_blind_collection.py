"""Blind is not OK under Airflow: fleet_maintenance over two clusters of the secured Kafka 4.3 lab of
the test fleet (no new lab), one of them read by a principal without Describe on groups.

The blind cluster is the same brokers under another name and connection (a login with Describe on
the cluster and topics, Read on __consumer_offsets, nothing on groups). The run ends failed; the
fine cluster's verdicts are still produced and reported; the blind one is named in one line in
the task log, and the fleet page and the report show it in red, its groups never OK."""

from __future__ import annotations

import json
import secrets
import uuid

import pytest
import yaml

from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetlab.traffic import commit, produce, wait_topic
from tests.conftest import write_fleet_file
from tests.helpers import mapped_task_states, wait_until

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(900)]
CLUSTER, BLIND = "lab43test", "lab43blind"


def add_user_without_group_acls(lab) -> tuple[str, str]:
    """A SCRAM login on the lab with Describe on the cluster and topics and Read on
    __consumer_offsets: it lists groups and may describe none of them."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    user, password = f"nogroups-{uuid.uuid4().hex[:6]}", secrets.token_urlsafe(16)
    admin = lab.admin()
    for fut in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())]).values():
        fut.result(timeout=30)
    acls = [AclBinding(rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op, AclPermissionType.ALLOW)
            for rtype, name, op in [(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
                                    (ResourceType.TOPIC, "*", AclOperation.DESCRIBE),
                                    (ResourceType.TOPIC, OFFSETS_TOPIC, AclOperation.READ)]]
    for fut in admin.create_acls(acls).values():
        fut.result(timeout=30)
    return user, password


def test_a_blind_cluster_fails_the_run_after_the_others_are_judged(lab_fleet, dagbag, tmp_path, unique,
                                                                    monkeypatch, capfd, caplog):
    from fleetkit.clients.kafka import KafkaCluster, client_config

    handle = lab_fleet(CLUSTER)
    spec = handle.spec
    admin = spec.security_config("admin")
    topic, group = unique("blind-orders"), unique("blind-billing")
    wait_topic(spec.bootstrap, topic, kafka_version=spec.kafka_version, security=admin)
    produce(spec.bootstrap, topic, {0: 10, 1: 10}, kafka_version=spec.kafka_version, security=admin)
    commit(spec.bootstrap, group, {(topic, p): 10 for p in range(2)}, kafka_version=spec.kafka_version,
           security=admin)

    user, password = add_user_without_group_acls(handle.lab)
    blind_conn = {"conn_type": "kafka", "extra": {"bootstrap.servers": spec.bootstrap,
                                                  **spec.security_config(user, password)}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{BLIND.upper()}_KAFKA", json.dumps(blind_conn))

    def refused_to_the_new_user() -> bool:  # the credential and ACLs reach the brokers through the metadata log
        k = KafkaCluster(BLIND, client_config(blind_conn["extra"], spec.kafka_version), timeout=10)
        try:
            d = k.describe_groups([group])[group]
            return d.error == "GROUP_AUTHORIZATION_FAILED"
        finally:
            k.close()

    wait_until(refused_to_the_new_user, 60, "the new login refused Describe on the group", retry_on=(Exception,))

    fleet_file = write_fleet_file(spec, tmp_path / "fleet.yaml")
    doc = yaml.safe_load(fleet_file.read_text())
    blind = dict(doc["clusters"][0], name=BLIND, kafka_conn_id=f"{BLIND}_kafka")
    blind.pop("runbook_kafka_conn_id", None)
    doc["clusters"].append(blind)
    fleet_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    data = tmp_path / "data"
    monkeypatch.setenv("FLEET_FILE", str(fleet_file))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))

    dr = dagbag.get_dag("fleet_maintenance").test(
        run_conf={"window": "2m", "offsets_health": "never"})
    states = mapped_task_states(dr)
    assert dr.state == "failed", states
    collect = {k[1]: s for k, s in states.items() if k[0] == "collect"}
    assert sorted(collect.values()) == ["failed", "success"], states
    assert states[("analyse_stuck", -1)] == "success" and states[("report_stuck", -1)] == "success", states
    assert states[("all_clusters_collected", -1)] == "upstream_failed", states

    # the fine cluster's verdicts were produced and published; none for the blind one
    latest = data / "reports" / "stuck" / "latest"
    groups = [json.loads(line) for line in (latest / "groups.jsonl").read_text().splitlines() if line.strip()]
    assert any(g["cluster"] == CLUSTER and g["group"] == group for g in groups), groups[:5]
    assert not any(g["cluster"] == BLIND and g["group"] == group for g in groups)

    # one line per blind cluster in the task log, as the CLI says it; never a password
    line = (f"cluster {BLIND} blind: ")
    refusal = f"{user} may not DESCRIBE group"
    logged = capfd.readouterr()
    text = logged.out + logged.err + "\n".join(r.getMessage() for r in caplog.records)
    blind_lines = [t for t in text.splitlines() if line in t and refusal in t and "GROUP_AUTHORIZATION_FAILED" in t]
    assert blind_lines, text[-3000:]
    assert not any(f"cluster {CLUSTER} blind:" in t for t in text.splitlines())
    assert any(f"BLIND {BLIND}: blind: " in t for t in text.splitlines()), "no alert for the blind cluster"
    assert password not in text and all(p not in text for p in spec.passwords().values())

    # the report names it in red
    report = (latest / "report.html").read_text()
    assert f'<span class="BLIND">{BLIND}</span>: blind: ' in report and refusal in report

    # the fleet page: the blind cluster red with its line; the fine one not
    from fleet_airflow import fleet_page

    page = str(fleet_page._page("fleet_page.html.j2", **fleet_page.overview_context(
        fleet_page._view(), fleet_page._fleet()), user="admin").body, "utf-8")
    rows = {r.split("</td>")[0]: r for r in page.split('<table id="clusters">')[1].split("</table>")[0].split("<tr")}
    blind_row = next(r for r in rows.values() if f">{BLIND}</a>" in r)
    fine_row = next(r for r in rows.values() if f">{CLUSTER}</a>" in r)
    assert 'class="blind-cluster"' in blind_row and "blind: 1 group(s) not seen" not in fine_row
    assert refusal in blind_row and "GROUP_AUTHORIZATION_FAILED" in blind_row, blind_row
    assert "blind-cluster" not in fine_row, fine_row
