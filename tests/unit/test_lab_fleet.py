"""The lab fleet's plan: pinned distributions, the port plan, broker settings per generation."""

from __future__ import annotations

import hashlib
import itertools
import json

import pytest

from fleetkit.core.errors import LabError
from fleetlab import dists, ports
from fleetlab.lab_spec import LabSpec, fleet_specs


def _all_ports(plan: ports.PortPlan) -> list[int]:
    out = [plan.airflow_api, plan.postgres, plan.redis, plan.spark_master, plan.spark_master_ui, plan.prometheus,
           plan.alertmanager, plan.burrow, plan.burrow_zookeeper]
    for i in range(2):
        out += [plan.celery_log_server(i), plan.spark_worker(i), plan.spark_worker_ui(i)]
    for name in list(ports.CLUSTERS) + list(ports.SINGLE_PURPOSE):
        if name in ports.SHARED_SLOTS:  # the same ports as the lab it shares a slot with
            assert ports.SINGLE_PURPOSE[name] == ports.SINGLE_PURPOSE[ports.SHARED_SLOTS[name]]
            continue
        c = plan.cluster(name)
        out.append(c["zk_port"])
        out += [c["broker_base_port"] + i for i in range(3)] + [c["controller_base_port"] + i for i in range(3)]
        out += [c["broker_base_port"] + 25 + i for i in range(3)]  # secured labs' INTERNAL listeners
    return out


def test_port_plan_has_no_collision_within_or_between_the_demo_and_test_labs(monkeypatch):
    plans = {"demo": ports.DEMO, **{f"tests+{o}": ports.PortPlan(ports.TEST_BASE + o) for o in range(0, 4000, 1000)}}
    monkeypatch.setenv("FLEET_TEST_PORT_OFFSET", "0")
    assert ports.tests() == plans["tests+0"]
    for name, plan in plans.items():
        used = _all_ports(plan)
        assert len(used) == len(set(used)), f"{name} uses a port twice"
        # below Linux's default ephemeral range (32768-60999): the kernel never hands one of these
        # to a client socket as its local port, so a restarted broker can always bind its own
        assert all(1024 < p < 32768 for p in used), f"{name}: {sorted(p for p in used if p >= 32768)}"
        # no product's default port: a real service on the machine never collides with the lab
        assert not set(used) & {2181, 9092, 5432, 6379, 7077, 8080, 8081, 8793, 9090, 9093, 9094}
    for (a, pa), (b, pb) in itertools.combinations(plans.items(), 2):
        assert not set(_all_ports(pa)) & set(_all_ports(pb)), f"{a} and {b} share a port"


def test_fleet_specs_take_versions_and_ports_from_the_plan(tmp_path):
    specs = fleet_specs(tmp_path, ports.PortPlan(31000), suffix="test")
    assert list(specs) == ["labtest", "lab39test", "lab43test"]
    assert [s.kafka_version for s in specs.values()] == ["0.9.0.1", "3.9.2", "4.3.1"]
    assert [s.mode for s in specs.values()] == ["zookeeper", "zookeeper", "kraft"]
    assert specs["lab39test"].bootstrap == "127.0.0.1:40192,127.0.0.1:40193,127.0.0.1:40194"
    assert specs["lab43test"].controller_port(2) == 40344
    assert {s.lab_dir for s in specs.values()} == {str(tmp_path / n) for n in specs}


def test_broker_settings_per_generation(tmp_path):
    specs = fleet_specs(tmp_path, ports.DEMO)
    old, zk39, kraft = (specs[n].broker_props(1) for n in ("lab", "lab39", "lab43"))
    # 0.9: listeners (SSL for clients), offsets segment size set on the topic (0.9 ignores the broker setting)
    assert old["listeners"].startswith("SSL://127.0.0.1:29093,") and "offsets.topic.segment.bytes" not in old
    assert "group.initial.rebalance.delay.ms" not in old  # 0.9 does not know it
    # 0.9's followers leave the ISR after 10 s: its long-poll stays at the 0.5 s default
    assert "replica.fetch.wait.max.ms" not in old
    for modern in (zk39, kraft):
        assert modern["group.initial.rebalance.delay.ms"] == "0"
        assert int(modern["replica.fetch.wait.max.ms"]) <= 30000 // 6  # well within a 30 s lag time
        assert modern["auto.leader.rebalance.enable"] == "false"
        assert modern["offsets.topic.segment.bytes"] == str(100 * 1024 * 1024)
        assert "port" not in modern and "host.name" not in modern
    assert zk39["zookeeper.connect"] == "127.0.0.1:22281/kafka" and zk39["broker.id"] == "1"
    assert "zookeeper.connect" not in kraft and "broker.id" not in kraft
    assert kraft["process.roles"] == "broker,controller" and kraft["node.id"] == "1"
    assert kraft["controller.quorum.voters"] == "0@127.0.0.1:29342,1@127.0.0.1:29343,2@127.0.0.1:29344"
    assert kraft["listeners"] == ("SASL_SSL://127.0.0.1:29293,INTERNAL://127.0.0.1:29318,"
                                  "CONTROLLER://127.0.0.1:29343")
    assert kraft["group.coordinator.rebalance.protocols"] == "classic,consumer"
    assert int(kraft["group.consumer.min.session.timeout.ms"]) <= 3000


def test_every_cluster_is_secured(tmp_path):
    specs = fleet_specs(tmp_path, ports.DEMO)
    assert [s.security for s in specs.values()] == ["ssl", "sasl_ssl", "sasl_ssl"]
    old, zk39, kraft = (specs[n].broker_props(0) for n in ("lab", "lab39", "lab43"))
    assert old["listeners"] == "SSL://127.0.0.1:29092,PLAINTEXT://127.0.0.1:29117"
    assert old["authorizer.class.name"] == "kafka.security.auth.SimpleAclAuthorizer"
    assert zk39["listeners"] == "SASL_SSL://127.0.0.1:29192,INTERNAL://127.0.0.1:29217"
    assert zk39["advertised.listeners"] == zk39["listeners"]
    assert zk39["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT"
    assert zk39["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    assert kraft["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert kraft["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
    for props in (zk39, kraft):
        assert props["inter.broker.listener.name"] == "INTERNAL"
        assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,PLAIN,OAUTHBEARER"
        # PLAIN: every user of the lab with its own password, in the server's login module
        jaas = props["listener.name.sasl_ssl.plain.sasl.jaas.config"]
        spec = specs["lab39" if props is zk39 else "lab43"]
        assert jaas.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required ") and jaas.endswith(";")
        assert all(f'user_{u}="{spec.passwords()[u]}"' in jaas for u in ("admin", "fleet", "fleet-runbook"))
        assert props["allow.everyone.if.no.acl.found"] == "false"
        assert props["super.users"] == "User:admin;User:ANONYMOUS"
        assert props["zookeeper.connect" if props is zk39 else "process.roles"]
    # a saved open lab (lab.json from before) is secured all the same
    LabSpec(lab_dir=str(tmp_path / "lab39"), name="lab39", kafka_version="3.9.2").save()
    assert fleet_specs(tmp_path, ports.DEMO)["lab39"].secured
    with pytest.raises(LabError, match="Kerberos"):
        LabSpec(security="sasl_ssl").secured  # 0.9.0.1
    with pytest.raises(LabError, match="'ssl' \\(mutual TLS\\) on 0.9 labs"):
        LabSpec(kafka_version="3.9.2", security="ssl").secured


def test_a_0_9_lab_with_mutual_tls(tmp_path):
    """security="ssl": SSL for clients with a required certificate, PLAINTEXT between brokers on
    loopback (0.9 has no listener names), SimpleAclAuthorizer, the admin certificate a super user."""
    spec = LabSpec(lab_dir=str(tmp_path / "lab"), security="ssl")
    assert spec.secured and spec.mtls
    props = spec.broker_props(1)
    assert props["listeners"] == props["advertised.listeners"] == "SSL://127.0.0.1:29093,PLAINTEXT://127.0.0.1:29118"
    assert props["security.inter.broker.protocol"] == "PLAINTEXT"
    assert not {"port", "host.name", "advertised.port", "advertised.host.name"} & set(props)
    assert props["ssl.client.auth"] == "required" and props["ssl.keystore.type"] == "PKCS12"
    assert props["authorizer.class.name"] == "kafka.security.auth.SimpleAclAuthorizer"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:CN=admin,O=fleetlab;User:ANONYMOUS"
    assert props["ssl.keystore.password"] == spec.passwords()["tls:keystore"]
    assert oct(spec.secrets_file.stat().st_mode & 0o777) == "0o600"
    cfg = spec.security_config("fleet")
    assert cfg == {"security.protocol": "SSL", "ssl.ca.location": str(spec.tls_dir / "ca.pem"),
                   "ssl.certificate.location": str(spec.tls_dir / "fleet.pem"),
                   "ssl.key.location": str(spec.tls_dir / "fleet.key")}
    env = spec.connection_env()
    assert json.loads(env["AIRFLOW_CONN_LAB_KAFKA_RUNBOOK"])["extra"]["ssl.certificate.location"].endswith(
        "fleet-runbook.pem")
    assert spec.fleet_cluster()["runbook_kafka_conn_id"] == "lab_kafka_runbook"


def test_passwords_are_generated_once_with_mode_0600_and_not_on_any_command_line(tmp_path):
    spec = fleet_specs(tmp_path, ports.DEMO)["lab39"]
    assert not spec.secrets_file.exists()
    first = spec.passwords()  # asked before the lab starts (the tests' conftest does)
    assert set(first) == {"admin", "fleet", "fleet-runbook", "zookeeper:kafka", "zookeeper:fleet"}
    assert len(set(first.values())) == 5
    assert (spec.secrets_file.stat().st_mode & 0o777) == 0o600
    assert fleet_specs(tmp_path, ports.DEMO)["lab39"].passwords() == first
    # the brokers' settings (a file, 0600 when written, passed by path) hold the Kafka users'
    # passwords in PLAIN's login module only
    props = "".join(f"{k}={v}\n" for i in range(3) for k, v in spec.broker_props(i).items()
                    if k != "listener.name.sasl_ssl.plain.sasl.jaas.config")
    assert not any(pw in props for pw in first.values())


def test_connections_and_fleet_entries_per_generation(tmp_path):
    specs = fleet_specs(tmp_path, ports.DEMO)
    assert set(specs["lab43"].connection_env()) == {"AIRFLOW_CONN_LAB43_KAFKA", "AIRFLOW_CONN_LAB43_KAFKA_RUNBOOK"}
    assert set(specs["lab39"].connection_env()) == {"AIRFLOW_CONN_LAB39_KAFKA", "AIRFLOW_CONN_LAB39_KAFKA_RUNBOOK",
                                                    "AIRFLOW_CONN_LAB39_ZOOKEEPER", "AIRFLOW_CONN_LAB39_ZOOKEEPER_RUNBOOK"}
    assert set(specs["lab"].connection_env()) == {"AIRFLOW_CONN_LAB_KAFKA", "AIRFLOW_CONN_LAB_KAFKA_RUNBOOK",
                                                  "AIRFLOW_CONN_LAB_ZOOKEEPER"}
    assert specs["lab39"].runbook_kafka_conn_id == "lab39_kafka_runbook"
    env = specs["lab39"].connection_env()
    fleet = json.loads(env["AIRFLOW_CONN_LAB39_KAFKA"])["extra"]
    runbook = json.loads(env["AIRFLOW_CONN_LAB39_KAFKA_RUNBOOK"])["extra"]
    assert (fleet["sasl.username"], runbook["sasl.username"]) == ("fleet", "fleet-runbook")
    assert runbook["sasl.password"] == specs["lab39"].passwords()["fleet-runbook"]
    assert runbook["security.protocol"] == "SASL_SSL" and runbook["ssl.ca.location"].endswith("ca.pem")
    # lab39's ZooKeeper requires SASL: the scheduled reads log in as `fleet`, the runbooks as the
    # brokers' own user (who alone may create under /admin)
    zk_read, zk_runbook = (json.loads(env[f"AIRFLOW_CONN_LAB39_ZOOKEEPER{s}"]) for s in ("", "_RUNBOOK"))
    assert (zk_read["login"], zk_runbook["login"]) == ("fleet", "kafka")
    assert zk_read["extra"] == zk_runbook["extra"] == {"auth": "sasl"}
    assert zk_runbook["password"] == specs["lab39"].passwords()["zookeeper:kafka"]
    assert specs["lab39"].fleet_cluster()["zookeeper"] == {"conn_id": "lab39_zookeeper", "chroot": "/kafka",
                                                           "runbook_conn_id": "lab39_zookeeper_runbook"}
    assert specs["lab"].zk_login() == {} and "login" not in json.loads(specs["lab"].connection_env()[
        "AIRFLOW_CONN_LAB_ZOOKEEPER"])  # 0.9's ZooKeeper 3.4.6 stays open
    assert "zookeeper" not in specs["lab43"].fleet_cluster()
    assert "cleaner" in specs["lab"].fleet_cluster()  # 0.9 cannot report its cleaner settings
    assert "cleaner" not in specs["lab39"].fleet_cluster()


def test_client_settings_get_the_old_protocol_fallbacks_only_on_0_9(tmp_path):
    specs = fleet_specs(tmp_path, ports.DEMO)
    assert specs["lab"].client_config()["api.version.request"] is False
    assert specs["lab"].client_config()["broker.version.fallback"] == "0.9.0"
    for name in ("lab39", "lab43"):
        cfg = specs[name].client_config()
        assert "api.version.request" not in cfg and "broker.version.fallback" not in cfg


def test_a_saved_lab_keeps_its_overrides_and_cluster_id(tmp_path):
    spec = LabSpec(lab_dir=str(tmp_path / "lab43"), name="lab43", kafka_version="4.3.1",
                   cluster_id="AAAAAAAAAAAAAAAAAAAAAA", broker_overrides={"log.cleaner.threads": 2})
    spec.save()
    again = fleet_specs(tmp_path, ports.DEMO)["lab43"]
    assert again.cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"
    assert again.broker_props(0)["log.cleaner.threads"] == "2"


def test_unknown_kafka_version_is_a_clear_error():
    with pytest.raises(LabError, match=r"no Kafka '2.0.0'.*0.9.0.1, 3.9.2, 4.3.1"):
        LabSpec(kafka_version="2.0.0").dist


def _jar(folder, name, content):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(content)
    return hashlib.sha256(content).hexdigest()


def test_jars_are_checked_against_the_pinned_checksums(tmp_path):
    libs = tmp_path / "libs"
    pinned = {"kafka.jar": _jar(libs, "kafka.jar", b"real"), "zk.jar": _jar(libs, "zk.jar", b"zk")}
    dists.verify("9.9.9", libs, pinned)  # all match: no error
    (libs / "kafka.jar").write_bytes(b"tampered")
    _jar(libs, "extra.jar", b"?")
    (libs / "zk.jar").unlink()
    with pytest.raises(LabError) as e:
        dists.verify("9.9.9", libs, pinned)
    text = str(e.value)
    assert "missing zk.jar" in text and "unexpected extra.jar" in text
    assert f"checksum of kafka.jar is {hashlib.sha256(b'tampered').hexdigest()}, pinned {pinned['kafka.jar']}" in text


def test_every_distribution_is_pinned_in_the_checksum_file():
    pinned = dists.read_checksums()
    s3proxy_folder, s3proxy_jar = dists.s3proxy_key().split("/")
    # and the lab's object store, Spark's s3a connector and the lab's Storm topology
    assert set(pinned) == set(dists.DISTS) | {s3proxy_folder, dists.hadoop_aws_folder(), dists.storm_folder()}
    assert any(jar.startswith("storm-kafka-") for jar in pinned[dists.storm_folder()])
    assert "hadoop-aws-3.5.0.jar" in pinned[dists.hadoop_aws_folder()]
    assert len(pinned[s3proxy_folder][s3proxy_jar]) == 64
    for version, dist in dists.DISTS.items():
        assert dist.marker_jar in pinned[version]
        assert all(len(d) == 64 for d in pinned[version].values())
    assert "zookeeper-3.8.4.jar" in pinned["3.9.2"]  # 3.9's own ZooKeeper comes with its tree
    assert {"log4j-core-2.25.4.jar", "log4j-slf4j-impl-2.25.4.jar"} <= set(pinned["4.3.1"])
    assert {"reload4j-1.2.25.jar", "slf4j-reload4j-1.7.36.jar"} <= set(pinned["3.9.2"])


def test_a_malformed_checksum_line_names_the_file_and_line(tmp_path):
    bad = tmp_path / "sums"
    bad.write_text("# comment\nabc\n")
    with pytest.raises(LabError, match=r"sums:2: expected"):
        dists.read_checksums(bad)


def test_a_fatal_broker_start_is_told_apart_and_named(tmp_path):
    """The lab restarts a broker that logged a fatal start-up error since it was started (a port
    taken for a moment, a registration of a killed process not yet expired), and names why; what
    the log held before the start does not count."""
    from fleetlab.lab import Lab

    spec = LabSpec(lab_dir=str(tmp_path / "lab"), name="fatal")
    log_path = spec.broker_dir(0) / "logs" / "server.log"
    log_path.parent.mkdir(parents=True)
    log_path.write_text("[t] FATAL [Kafka Server 0], Fatal error during KafkaServer startup. Prepare to shutdown\n"
                        "java.lang.RuntimeException: an old start\n")
    lab = Lab(spec)
    check = lab._start_failure_check(0)
    assert check() == ""
    with open(log_path, "a") as f:
        f.write("[t] INFO starting\n[t] FATAL [Kafka Server 0], Fatal error during KafkaServer startup. "
                "Prepare to shutdown (kafka.server.KafkaServer)\n"
                "java.lang.RuntimeException: A broker is already registered on the path /brokers/ids/0.\n")
    assert check() == ("it failed to start: java.lang.RuntimeException: A broker is already registered on the "
                       "path /brokers/ids/0.")
    bind = lab._start_failure_check(0)
    with open(log_path, "a") as f:
        f.write("[t] FATAL [Kafka Server 0], Fatal error during KafkaServer startup.\n"
                "kafka.common.KafkaException: Socket server failed to bind to localhost:1: Address already in use.\n")
    assert "taken by another socket" in bind()


def test_a_kraft_cluster_id_never_starts_with_a_dash(monkeypatch):
    """kafka-storage format read '--cluster-id -jse2...' as an option and failed: the KRaft lab never
    started (its id is kept in lab.json, so every retry failed the same way)."""
    import uuid

    from fleetlab import lab_spec as lab

    dashed = uuid.UUID(bytes=bytes([0xF8]) + bytes(15))  # URL-safe base64 of 0xF8... starts with '-'
    plain = uuid.UUID(bytes=bytes(16))
    draws = iter([dashed, plain])
    monkeypatch.setattr(lab.uuid, "uuid4", lambda: next(draws))
    assert lab.kraft_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"


def test_a_start_failure_is_seen_across_the_hourly_log_roll_over(tmp_path):
    """log4j rolls server.log at each hour (renamed to server.log.<date-hour>, a new one started):
    what the broker logged since the start is the rest of the renamed file plus the new file; a
    failed start logged just after the roll-over must not be missed (it was: the check read the new,
    shorter file from the old file's length)."""
    from fleetlab.lab import log_grown_since

    log = tmp_path / "server.log"
    log.write_bytes(b"old line\n" * 1000)
    then = log.stat()
    assert log_grown_since(log, then) == b""
    with open(log, "ab") as f:
        f.write(b"before the hour\n")
    log.rename(tmp_path / "server.log.2026-11-27-14")
    log.write_bytes(b"java.net.BindException: Address already in use\n")
    assert log_grown_since(log, then) == b"before the hour\njava.net.BindException: Address already in use\n"
    assert log_grown_since(tmp_path / "missing.log", None) == b""
    assert log_grown_since(log, None).startswith(b"java.net.BindException")


def test_the_lab_jvm_flags_replace_the_brokers_gc_defaults_only_when_given(monkeypatch):
    from fleetlab.procs import jvm_flags

    monkeypatch.delenv("FLEET_LAB_JVM_OPTS", raising=False)
    assert jvm_flags(("-XX:+UseG1GC",)) == ["-XX:+UseG1GC"]
    monkeypatch.setenv("FLEET_LAB_JVM_OPTS", " -XX:+UseSerialGC  -XX:TieredStopAtLevel=1 ")
    # one GC only: a second one would make the JVM refuse to start
    assert jvm_flags(("-XX:+UseG1GC",)) == ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    assert jvm_flags() == ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
