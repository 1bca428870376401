"""Fleet file validation: every error names the file and the field."""

import os
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
    broker_control:
      stop: [/opt/ctl, stop, "{broker}"]
      start: [bin/ctl, start, "--broker={broker}"]
      set_config: [/opt/ctl, set, "{broker}", "{key}={value}", "{{json}}"]
      timeout: 2m
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
    assert k.broker_control is None


def test_broker_control_commands_are_argv_templates():
    c = parse_fleet(GOOD, path="/etc/fleet.yaml", base_dir=Path("/etc")).cluster("prod-eu")
    bc = c.broker_control
    assert bc.cwd == "/etc" and bc.timeout_seconds == 120  # commands run in the fleet file's folder
    assert bc.stop == ("/opt/ctl", "stop", "{broker}") and bc.start[0] == "bin/ctl"  # argv kept as written
    assert bc.argv("stop", broker=3) == ["/opt/ctl", "stop", "3"]
    assert bc.argv("start", broker=1) == ["bin/ctl", "start", "--broker=1"]
    # a value stays one element, whatever it holds; placeholders in values are not expanded again
    assert bc.argv("set_config", broker=1, key="a b", value="x; rm -rf / {broker}") == \
        ["/opt/ctl", "set", "1", "a b=x; rm -rf / {broker}", "{json}"]
    minimal = yaml.safe_load(GOOD)
    del minimal["clusters"][0]["broker_control"]["set_config"], minimal["clusters"][0]["broker_control"]["timeout"]
    bc = parse_fleet(yaml.safe_dump(minimal), path="f.yaml", base_dir=Path("/")).cluster("prod-eu").broker_control
    assert bc.set_config is None and bc.timeout_seconds == 600
    with pytest.raises(FleetConfigError, match="no set_config command"):
        bc.argv("set_config", broker=1, key="k", value="v")


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
    (lambda d: d["clusters"][0].update(broker_control=["ctl"]), "clusters[prod-eu].broker_control",
     "expected a mapping"),
    (lambda d: d["clusters"][0]["broker_control"].pop("stop"), "clusters[prod-eu].broker_control",
     "missing required field 'stop'"),
    (lambda d: d["clusters"][0]["broker_control"].update(restart=["x"]), "broker_control", "unknown field(s) restart"),
    (lambda d: d["clusters"][0]["broker_control"].update(stop="/opt/ctl stop {broker}"), "broker_control.stop",
     "expected a list of strings"),
    (lambda d: d["clusters"][0]["broker_control"].update(stop=[]), "broker_control.stop", "non-empty list"),
    (lambda d: d["clusters"][0]["broker_control"].update(stop=["/opt/ctl", 3]), "broker_control.stop[1]",
     "non-empty string"),
    (lambda d: d["clusters"][0]["broker_control"].update(stop=["/opt/ctl", "{host}"]), "broker_control.stop[1]",
     "unknown placeholder(s) {host} (allowed here: {broker})"),
    (lambda d: d["clusters"][0]["broker_control"].update(start=["/opt/ctl", "{key}", "{broker}"]),
     "broker_control.start[1]", "unknown placeholder(s) {key}"),
    (lambda d: d["clusters"][0]["broker_control"].update(stop=["/opt/ctl", "{broker"]), "broker_control.stop[1]",
     "lone '{'"),
    (lambda d: d["clusters"][0]["broker_control"].update(stop=["/opt/{broker}/ctl"]), "broker_control.stop[0]",
     "must not hold placeholders"),
    (lambda d: d["clusters"][0]["broker_control"].update(stop=["/opt/ctl", "stop"]), "broker_control.stop",
     "must pass {broker}"),
    (lambda d: d["clusters"][0]["broker_control"].update(set_config=["/opt/ctl", "{broker}", "{key}"]),
     "broker_control.set_config", "must pass {value}"),
    (lambda d: d["clusters"][0]["broker_control"].update(timeout="soon"), "broker_control.timeout", "not a duration"),
    (lambda d: d["clusters"][0]["broker_control"].update(timeout=0), "broker_control.timeout", "must be > 0"),
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


@pytest.mark.parametrize("name", ["lab", "lab39", "lab43"])
def test_shipped_lab_fleet_matches_the_lab_it_describes(name):
    """lab/fleets/lab.yaml must describe what `fleetlab up` starts, cluster by cluster."""
    from fleetlab.lab_spec import fleet_specs

    fleet = load_fleet(REPO / "lab" / "fleets" / "lab.yaml")
    assert [c.name for c in fleet.clusters] == ["lab", "lab39", "lab43"]
    lab = fleet.cluster(name)
    spec = fleet_specs()[name]
    generated = parse_fleet(yaml.safe_dump(spec.fleet_document()), path="gen").cluster(name)
    assert lab.kafka_conn_id == generated.kafka_conn_id == f"{name}_kafka"
    # every cluster is secured (0.9: mutual TLS): the runbooks have their own principal's connection
    assert lab.runbook_kafka_conn_id == generated.runbook_kafka_conn_id == f"{name}_kafka_runbook"
    assert lab.kafka_version == generated.kafka_version == spec.kafka_version
    assert lab.zookeeper == generated.zookeeper
    assert (lab.zookeeper is None) == (name == "lab43")  # KRaft: no ZooKeeper
    assert lab.cleaner == generated.cleaner
    assert [b.log_dirs for b in lab.brokers] == [b.log_dirs for b in generated.brokers]
    assert lab.offsets_topic_partitions == 50

    def absolute(bc):  # relative elements of the shipped file resolve against its folder
        return {cmd: [os.path.normpath(os.path.join(bc.cwd, a)) if a.startswith(".") else a
                      for a in getattr(bc, cmd)] for cmd in ("stop", "start", "set_config")}

    assert absolute(lab.broker_control) == absolute(generated.broker_control)
    assert lab.broker_control.stop == ("../../.venv/bin/fleetlab", "stop-broker", "--lab-dir", f"../../.lab/{name}",
                                       "{broker}")
    assert absolute(lab.broker_control)["set_config"] == [
        str(REPO / ".venv" / "bin" / "fleetlab"), "broker-config", "--lab-dir", str(REPO / ".lab" / name),
        "{broker}", "{key}={value}"]


def test_lab_fleet_versions_come_from_the_pinned_distributions():
    from fleetlab import dists, ports

    assert {v for v, _, _ in ports.CLUSTERS.values()} == set(dists.DISTS)
    assert [ports.CLUSTERS[n][1] for n in ("lab", "lab39", "lab43")] == ["zookeeper", "zookeeper", "kraft"]


def test_lab_fleet_document_escapes_braces_in_its_paths():
    spec = LabSpec(lab_dir="/tmp/odd {broker} lab")
    bc = parse_fleet(yaml.safe_dump(spec.fleet_document()), path="gen").cluster("lab").broker_control
    assert bc.argv("stop", broker=1)[-3:] == ["--lab-dir", "/tmp/odd {broker} lab", "1"]


def test_a_fleet_file_that_is_not_utf8_names_the_file_and_line(tmp_path):
    p = tmp_path / "fleet.yaml"
    p.write_bytes(GOOD.replace("[alice]", "[alice]  # Zürich").encode("latin-1"))
    with pytest.raises(FleetConfigError) as e:
        load_fleet(p)
    text = str(e.value)
    assert str(p) in text and "not UTF-8" in text and "byte 0xfc at line 9" in text, text


@pytest.mark.parametrize("written, seen", [("0.10", "0.1"), ("2.8", "2.8"), ("2.10", "2.1"), ("1.0", "1.0")])
def test_an_unquoted_kafka_version_is_refused_with_the_fix(written, seen):
    text = GOOD.replace('kafka_version: "0.9.0.1"', f"kafka_version: {written}")
    with pytest.raises(FleetConfigError) as e:
        parse_fleet(text, path="fleet.yaml", base_dir=Path("/etc"))
    msg = str(e.value)
    assert msg.startswith("fleet.yaml: clusters[prod-eu].kafka_version: expected a version string"), msg
    assert f"the number {seen}" in msg and "quote it" in msg
    quoted = parse_fleet(GOOD.replace('kafka_version: "0.9.0.1"', f'kafka_version: "{written}"'), path="f.yaml",
                         base_dir=Path("/etc")).cluster("prod-eu")
    assert quoted.kafka_version == written  # quoted, 0.10 stays 0.10 (not 0.1)


def test_a_kafka_version_of_another_type_is_refused():
    with pytest.raises(FleetConfigError, match=r"clusters\[prod-eu\].kafka_version: expected a version string, "
                                               r"got bool True$"):
        parse_fleet(GOOD.replace('kafka_version: "0.9.0.1"', "kafka_version: yes"), path="f.yaml")


@pytest.mark.parametrize("log_dir, base, access", [
    ("/", "/etc", "local"), ("/data", "/etc", "local"), ("//", "/etc", "local"), ("/data/..", "/etc", "local"),
    ("data", "/", "local"), (".", "/etc", "local"), ("..", "/etc", "local"), ("../..", "/etc/kafka", "local"),
    ("/kafka-logs", "/etc", "ssh"), ("/", "/etc", "ssh"),
])
def test_a_log_dir_too_close_to_root_is_refused(log_dir, base, access):
    doc = yaml.safe_load(GOOD)
    doc["clusters"][0]["brokers"][0].update(log_dirs=["/var/lib/kafka/ok", log_dir], access=access,
                                             **({"ssh_conn_id": "k1_ssh"} if access == "ssh" else {}))
    with pytest.raises(FleetConfigError) as e:
        parse_fleet(yaml.safe_dump(doc), path="fleet.yaml", base_dir=Path(base))
    msg = str(e.value)
    assert msg.startswith("fleet.yaml: clusters[prod-eu].brokers[0].log_dirs[1]: "), msg
    assert "too close to /" in msg and "trim moves segment files out of it" in msg


@pytest.mark.parametrize("log_dir, access, message", [
    ("kafka/data", "ssh", "must be absolute"),
    ("/var/lib/../kafka", "ssh", "must not hold . or .. components"),
    ("/var/lib/kafka\ndata", "local", "control character"),
])
def test_a_log_dir_that_is_not_a_plain_path_is_refused(log_dir, access, message):
    doc = yaml.safe_load(GOOD)
    doc["clusters"][0]["brokers"][0].update(log_dirs=[log_dir], access=access,
                                             **({"ssh_conn_id": "k1_ssh"} if access == "ssh" else {}))
    with pytest.raises(FleetConfigError, match=f"brokers\\[0\\].log_dirs\\[0\\]: .*{message}"):
        parse_fleet(yaml.safe_dump(doc), path="fleet.yaml", base_dir=Path("/etc"))


def test_log_dirs_that_are_deep_enough_parse():
    doc = yaml.safe_load(GOOD)
    doc["clusters"][0]["brokers"][0]["log_dirs"] = ["/data/k1/", "/tmp/kafka-logs", "k1", "../var/k1"]
    doc["clusters"][0]["brokers"][2]["log_dirs"] = ["/srv/kafka/data"]
    c = parse_fleet(yaml.safe_dump(doc), path="fleet.yaml", base_dir=Path("/etc")).cluster("prod-eu")
    assert c.broker(1).log_dirs == ("/data/k1", "/tmp/kafka-logs", "/etc/k1", "/var/k1")
    assert c.broker(3).log_dirs == ("/srv/kafka/data",)
    doc["clusters"][0]["brokers"][0]["log_dirs"] = ["/data/k1", "/data/k1/"]
    with pytest.raises(FleetConfigError, match=r"brokers\[0\].log_dirs: a log dir appears twice"):
        parse_fleet(yaml.safe_dump(doc), path="fleet.yaml", base_dir=Path("/etc"))


def test_require_approvers_names_the_file_and_cluster(tmp_path):
    p = tmp_path / "fleet.yaml"
    p.write_text(GOOD)
    fleet = load_fleet(p)
    assert fleet.cluster("prod-eu").require_approvers() == ("alice",)
    with pytest.raises(FleetConfigError) as e:
        fleet.cluster("kraft1").require_approvers()
    assert str(e.value).startswith(f"fleet file {p}: cluster kraft1: `approvers` is required for destructive "
                                   "runbooks (")
    assert fleet.cluster("kraft1") == parse_fleet(GOOD, path="other.yaml").cluster("kraft1")  # not part of equality


# -- the runbooks' own principal -------------------------------------------------------------------
RUNBOOK = """
version: 1
clusters:
  - name: prod-eu
    kafka_conn_id: prod_eu_kafka
    runbook_kafka_conn_id: prod_eu_kafka_runbook
    zookeeper: {conn_id: prod_eu_zk, runbook_conn_id: prod_eu_zk_runbook, chroot: /kafka}
    offset_stores:
      - {kind: zookeeper, conn_id: prod_eu_zk, chroot: /kafka}
      - {kind: storm, conn_id: storm_zk, root: /spouts}
      - {kind: storm, conn_id: storm_zk, root: /spouts2, runbook_conn_id: storm_zk_runbook}
  - name: plain
    kafka_conn_id: plain_kafka
    zookeeper: {conn_id: plain_zk}
    offset_stores: [{kind: zookeeper, conn_id: plain_zk}]
"""


def test_runbook_connections_are_chosen_for_steps_that_change_the_cluster():
    fleet = parse_fleet(RUNBOOK, path="fleet.yaml", base_dir=Path("/"))
    c = fleet.cluster("prod-eu")
    assert (c.kafka_conn_id_for(), c.kafka_conn_id_for(changes=True)) == ("prod_eu_kafka", "prod_eu_kafka_runbook")
    assert (c.zookeeper.conn_id_for(), c.zookeeper.conn_id_for(True)) == ("prod_eu_zk", "prod_eu_zk_runbook")
    own, storm, storm2 = c.offset_stores
    # a store on the cluster's own ZooKeeper connection follows zookeeper.runbook_conn_id
    assert (own.conn_id_for(), own.conn_id_for(True)) == ("prod_eu_zk", "prod_eu_zk_runbook")
    # another ZooKeeper (Storm's): its own runbook_conn_id, else its conn_id
    assert (storm.conn_id_for(), storm.conn_id_for(True)) == ("storm_zk", "storm_zk")
    assert (storm2.conn_id_for(), storm2.conn_id_for(True)) == ("storm_zk", "storm_zk_runbook")


def test_without_runbook_connections_every_step_uses_the_read_only_one():
    c = parse_fleet(RUNBOOK, path="fleet.yaml", base_dir=Path("/")).cluster("plain")
    assert c.runbook_kafka_conn_id is None and c.zookeeper.runbook_conn_id is None
    assert c.kafka_conn_id_for(changes=True) == c.kafka_conn_id_for() == "plain_kafka"
    assert c.zookeeper.conn_id_for(True) == "plain_zk" and c.offset_stores[0].conn_id_for(True) == "plain_zk"


@pytest.mark.parametrize("mutate, field, message", [
    (lambda d: d["clusters"][0].update(runbook_kafka_conn_id="bad id!"), "clusters[prod-eu].runbook_kafka_conn_id",
     "is not a valid connection id"),
    (lambda d: d["clusters"][0].update(runbook_kafka_conn_id=""), "clusters[prod-eu].runbook_kafka_conn_id",
     "non-empty string"),
    (lambda d: d["clusters"][0].update(runbook_kafka_conn_id=["a"]), "clusters[prod-eu].runbook_kafka_conn_id",
     "non-empty string"),
    (lambda d: d["clusters"][0]["zookeeper"].update(runbook_conn_id="a/b"),
     "clusters[prod-eu].zookeeper.runbook_conn_id", "is not a valid connection id"),
    (lambda d: d["clusters"][0]["offset_stores"][1].update(runbook_conn_id="x y"),
     "clusters[prod-eu].offset_stores[1].runbook_conn_id", "is not a valid connection id"),
    (lambda d: d["clusters"][0].update(runbook_conn_id="x"), "clusters[0]", "unknown field(s) runbook_conn_id"),
    (lambda d: d["clusters"][0]["zookeeper"].update(runbook_kafka_conn_id="x"), "clusters[prod-eu].zookeeper",
     "unknown field(s) runbook_kafka_conn_id"),
])
def test_bad_runbook_connections_name_the_field(mutate, field, message):
    doc = yaml.safe_load(RUNBOOK)
    mutate(doc)
    with pytest.raises(FleetConfigError) as e:
        parse_fleet(yaml.safe_dump(doc), path="fleet.yaml", base_dir=Path("/"))
    assert str(e.value).startswith(f"fleet.yaml: {field}: ") and message in str(e.value), str(e.value)


def test_the_fleet_file_reference_documents_the_runbook_fields():
    import fleetkit.core.fleet as fleet_module

    readme = (REPO / "README.md").read_text()
    for name in ("runbook_kafka_conn_id", "runbook_conn_id"):
        assert name in fleet_module.__doc__ and name in readme
