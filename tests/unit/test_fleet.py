"""Fleet file validation: every error names the file and the field."""

from pathlib import Path

import pytest
import yaml

from fleetkit.core.errors import FleetConfigError
from fleetkit.core.fleet import load_fleet, parse_fleet
from fleetlab.lab import LabSpec

REPO = Path(__file__).resolve().parents[2]

GOOD = """
version: 1
clusters:
  - name: prod-eu
    kafka_version: "0.9.0.1"
    kafka_conn_id: prod_eu_kafka
    zookeeper: {conn_id: prod_eu_zk, chroot: /kafka}
    groups: [billing, "x; rm -rf / #"]
    approvers: [alice]
    cleaner: {dedupe_buffer_size: 2097152, threads: 1}
    brokers:
      - {id: 1, log_dirs: [/data/k1], access: local}
      - {id: 2, log_dirs: [relative/dir], access: local}
      - {id: 3, access: ssh, ssh_conn_id: k3_ssh}
  - name: kraft1
    kafka_conn_id: kraft1
"""


def test_good_file_parses_with_defaults():
    fleet = parse_fleet(GOOD, path="/etc/fleet.yaml", base_dir=Path("/etc"))
    assert fleet.names == ["prod-eu", "kraft1"]
    c = fleet.cluster("prod-eu")
    assert c.needs_protocol_fallback and c.zk_mode
    assert c.zookeeper.chroot == "/kafka"
    assert c.offsets_topic_partitions == 50
    assert c.groups == ("billing", "x; rm -rf / #")
    assert c.cleaner.dedupe_buffer_size == 2097152 and c.cleaner.io_buffer_load_factor == 0.9
    assert c.broker(2).log_dirs == ("/etc/relative/dir",)
    assert c.broker(3).ssh_conn_id == "k3_ssh"
    k = fleet.cluster("kraft1")
    assert not k.zk_mode and not k.needs_protocol_fallback


@pytest.mark.parametrize("mutate, field, message", [
    (lambda d: d["clusters"][0].pop("kafka_conn_id"), "clusters[0]", "missing required field 'kafka_conn_id'"),
    (lambda d: d["clusters"][0].update(name="bad name!"), "clusters[0].name", "not a valid cluster name"),
    (lambda d: d["clusters"][1].update(name="prod-eu"), "clusters[1].name", "appears twice"),
    (lambda d: d["clusters"][0].update(offsets_topic_partitions=0), "offsets_topic_partitions", "must be >= 1"),
    (lambda d: d["clusters"][0].update(offsets_topic_partitions="50"), "offsets_topic_partitions", "expected an integer"),
    (lambda d: d["clusters"][0]["zookeeper"].update(chroot="kafka/"), "zookeeper.chroot", "must look like /kafka"),
    (lambda d: d["clusters"][0]["cleaner"].update(threads=0), "cleaner.threads", "must be >= 1"),
    (lambda d: d["clusters"][0]["cleaner"].update(io_buffer_load_factor=1.5), "io_buffer_load_factor", "must be in"),
    (lambda d: d["clusters"][0]["brokers"][1].update(id=1), "brokers[1].id", "appears twice"),
    (lambda d: d["clusters"][0]["brokers"][2].pop("ssh_conn_id"), "brokers[2].ssh_conn_id", "non-empty string"),
    (lambda d: d["clusters"][0]["brokers"][0].update(access="ftp"), "brokers[0].access", "'local' or 'ssh'"),
    (lambda d: d["clusters"][0].update(password="hunter2"), "clusters[0]", "unknown field(s) password"),
    (lambda d: d["clusters"][0].update(groups="billing"), "groups", "expected a list"),
    (lambda d: d["clusters"][0].update(kafka_version="zero.nine"), "kafka_version", "not a version"),
    (lambda d: d.update(version=2), "version", "unsupported fleet file version"),
    (lambda d: d.update(clusters=[]), "clusters", "non-empty list"),
])
def test_errors_name_the_field(mutate, field, message):
    doc = yaml.safe_load(GOOD)
    mutate(doc)
    with pytest.raises(FleetConfigError) as e:
        parse_fleet(yaml.safe_dump(doc), path="fleet.yaml", base_dir=Path("/"))
    text = str(e.value)
    assert text.startswith("fleet.yaml: ")
    assert field in text and message in text, text


def test_not_yaml_and_missing_file(tmp_path):
    with pytest.raises(FleetConfigError, match="not valid YAML"):
        parse_fleet("clusters: [", path="f.yaml")
    with pytest.raises(FleetConfigError, match="does not exist"):
        load_fleet(tmp_path / "nope.yaml")
    with pytest.raises(FleetConfigError, match="expected a mapping"):
        parse_fleet("- a\n- b\n", path="f.yaml")


def test_unknown_cluster_lists_known_ones():
    fleet = parse_fleet(GOOD, path="f.yaml", base_dir=Path("/"))
    with pytest.raises(FleetConfigError, match=r"no cluster named 'nope' \(clusters: prod-eu, kraft1\)"):
        fleet.cluster("nope")


def test_shipped_lab_fleet_matches_the_lab_it_describes():
    """include/fleets/lab.yaml must describe what `fleetctl lab up` starts."""
    fleet = load_fleet(REPO / "include" / "fleets" / "lab.yaml")
    lab = fleet.cluster("lab")
    spec = LabSpec()
    generated = parse_fleet(yaml.safe_dump(spec.fleet_document()), path="gen").cluster("lab")
    assert lab.kafka_conn_id == generated.kafka_conn_id == "lab_kafka"
    assert lab.zookeeper == generated.zookeeper
    assert lab.cleaner == generated.cleaner
    assert [b.log_dirs for b in lab.brokers] == [b.log_dirs for b in generated.brokers]
    assert lab.kafka_version == "0.9.0.1" and lab.offsets_topic_partitions == 50
