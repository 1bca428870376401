"""A lab cluster's description (LabSpec: where it lives, which Kafka, which ports, how secured)
and what it renders: broker and ZooKeeper properties, the toolkit's connections, the fleet-file
entry; fleet_specs, the lab fleet of three generations."""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from fleetlab import dists, oauth, ports
from fleetkit.core.kafka_names import DEFAULT_OFFSETS_PARTITIONS as OFFSETS_PARTITIONS
from fleetkit.core.errors import LabError
from fleetlab.paths import CHECKOUT as REPO_ROOT
from fleetlab.lab_security import (
    NODE_CN, SECURED_MECHANISM, SECURED_USERS, ZK_READ_USER, ZK_USER, ZK_USERS, ssl_principal,
)

#: the generation of the single-cluster labs tests and benchmarks start for themselves
KAFKA_VERSION = "0.9.0.1"


def ensure_kafka_dist(version: str = KAFKA_VERSION) -> Path:
    """The distribution folder of a Kafka version, fetched and checked on first use."""
    return dists.ensure(version)




def kraft_cluster_id() -> str:
    """A random KRaft cluster id as Kafka makes them (16 bytes, URL-safe base64 without padding),
    never starting with '-': the storage tool's argument parser would read it as an option (Kafka's
    own Uuid.randomUuid draws again in that case)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid




@dataclass
class LabSpec:
    """Where a lab cluster lives, which Kafka it runs and which ports it uses. The defaults are
    the demo fleet's 0.9 cluster."""

    lab_dir: str = str(REPO_ROOT / ".lab" / "lab")
    name: str = "lab"
    zk_port: int = ports.DEMO.zookeeper(0)
    broker_base_port: int = ports.DEMO.broker_base(0)
    brokers: int = 3
    chroot: str = "/kafka"
    broker_heap: str = "512m"
    broker_overrides: dict = field(default_factory=dict)
    #: segment.bytes of __consumer_offsets (0.9 ignores the broker's offsets.topic.segment.bytes,
    #: so there it is a topic config the lab sets when it creates the topic)
    offsets_segment_bytes: int = 100 * 1024 * 1024
    kafka_version: str = KAFKA_VERSION
    #: KRaft controller listeners (combined nodes): controller_base_port + node id
    controller_base_port: int = 0
    #: KRaft cluster id (generated when the storage is first formatted, kept in lab.json)
    cluster_id: str = ""
    #: "" (open PLAINTEXT listeners), "sasl_ssl" (Kafka 3.x/4.x only: see SECURED_USERS) or "ssl"
    #: (mutual TLS, Kafka 0.9 only: see SSL_USERS)
    security: str = ""
    #: "" (an open ZooKeeper) or "sasl" (ZooKeeper-mode 3.x labs only: see ZK_USER)
    zk_security: str = ""
    #: the several-hosts profile: per node id, {"address": ..., "netns": ...} of the lab host
    #: (fleetlab.hosts) it runs in; empty: every node on 127.0.0.1 of this machine. Secured KRaft
    #: labs only: there the inter-node listeners (INTERNAL, CONTROLLER) are mutual TLS, never
    #: PLAINTEXT, since they cross the lab's network
    broker_hosts: list = field(default_factory=list)
    #: with broker_hosts: each broker host runs an sshd (fleetlab.sshd, its files under <lab>/ssh),
    #: and the fleet file describes the brokers as access: ssh, each with its ssh connection
    #: (connection_env): the trim's file work and broker_control reach them over SSH
    broker_ssh: bool = False

    @property
    def path(self) -> Path:
        return Path(self.lab_dir)

    @property
    def dist(self) -> dists.Dist:
        return dists.get(self.kafka_version)

    @property
    def kraft(self) -> bool:
        return self.dist.kraft_only

    @property
    def modern(self) -> bool:
        """A generation with the Admin API (CreateTopics, DescribeConfigs, ApiVersions): 3.x and 4.x."""
        return self.dist.generation >= (1,)

    @property
    def mode(self) -> str:
        return "kraft" if self.kraft else "zookeeper"

    def broker_port(self, broker_id: int) -> int:
        return self.broker_base_port + broker_id

    @property
    def secured(self) -> bool:
        if self.security and (self.security, self.modern) not in (("sasl_ssl", True), ("ssl", False)):
            raise LabError(f"{self.name}: security {self.security!r} is not supported "
                           f"('sasl_ssl' on Kafka 3.x and 4.x labs, 'ssl' (mutual TLS) on 0.9 labs: "
                           f"0.9's SASL is Kerberos only)")
        return bool(self.security)

    @property
    def mtls(self) -> bool:
        """A 0.9 lab with mutual TLS (security "ssl")."""
        return self.secured and self.security == "ssl"

    def client_cert(self, user: str) -> tuple[Path, Path]:
        """mTLS labs: (certificate, key) PEM files of a user's client certificate."""
        return self.tls_dir / f"{user}.pem", self.tls_dir / f"{user}.key"

    @property
    def zk_sasl(self) -> bool:
        if self.zk_security and (self.zk_security != "sasl" or self.kraft or not self.modern):
            raise LabError(f"{self.name}: zk_security {self.zk_security!r} is not supported "
                           f"(only 'sasl', on ZooKeeper-mode 3.x labs: ZooKeeper 3.8)")
        return bool(self.zk_security)

    def host(self, node_id: int) -> str:
        """The address node `node_id` listens on: its lab host's, else 127.0.0.1."""
        return self.broker_hosts[node_id]["address"] if self.broker_hosts else "127.0.0.1"

    def netns(self, node_id: int) -> str | None:
        """The network namespace node `node_id` runs in (the several-hosts profile), else None."""
        return self.broker_hosts[node_id]["netns"] if self.broker_hosts else None

    @property
    def on_hosts(self) -> bool:
        if self.broker_hosts and (len(self.broker_hosts) != self.brokers or not (self.kraft and self.security == "sasl_ssl")):
            raise LabError(f"{self.name}: broker_hosts needs one host per node ({self.brokers}) and a secured KRaft "
                           f"lab (security 'sasl_ssl', Kafka 4.x), got {len(self.broker_hosts)} on {self.kafka_version} "
                           f"with security {self.security!r}")
        return bool(self.broker_hosts)

    def sshd(self, node_id: int):
        """broker_ssh: the sshd of node `node_id`'s lab host (fleetlab.sshd.Sshd)."""
        from fleetlab.sshd import Sshd

        if not (self.broker_ssh and self.on_hosts):
            raise LabError(f"{self.name}: broker_ssh needs broker_hosts (each broker in a lab host of its own)")
        return Sshd(self.path / "ssh" / f"broker-{node_id}", self.host(node_id), self.netns(node_id))

    def ssh_conn_id(self, node_id: int) -> str:
        """broker_ssh: the ssh connection of node `node_id`'s host (the fleet file's ssh_conn_id)."""
        return f"{self.conn_prefix}_broker{node_id}_ssh"

    @property
    def node_principal(self) -> str:
        """The several-hosts profile: the principal of the nodes and of the lab's own inter-node
        client (the certificate's subject), a super user."""
        return f"User:CN={NODE_CN}"

    def internal_port(self, node_id: int) -> int:
        """Secured labs: the PLAINTEXT inter-broker listener of a node."""
        return self.broker_base_port + 25 + node_id

    @property
    def tls_dir(self) -> Path:
        return self.path / "tls"

    @property
    def secrets_file(self) -> Path:
        return self.path / "secrets.json"

    def passwords(self) -> dict[str, str]:
        """{user: password} of a secured lab (generated at the first call, kept in secrets.json)."""
        self.ensure_passwords()
        try:
            return json.loads(self.secrets_file.read_text())
        except (OSError, ValueError) as e:
            raise LabError(f"{self.name}: no readable {self.secrets_file}: {e}") from None

    def ensure_passwords(self) -> None:
        """Generate the users' random passwords into secrets.json (mode 0600) unless it exists. Written
        to a temporary file and linked into place, so a concurrent reader never sees half a file."""
        import secrets as _secrets

        users = ["tls:keystore"] if self.security == "ssl" else [*SECURED_USERS]
        users += [f"zookeeper:{u}" for u in ZK_USERS] if self.zk_security else []
        try:
            known = json.loads(self.secrets_file.read_text())
        except (OSError, ValueError):
            known = None
        if known is not None and all(u in known for u in users):
            return
        self.path.mkdir(parents=True, exist_ok=True)
        doc = dict({u: _secrets.token_urlsafe(24) for u in users}, **(known or {}))
        tmp = self.path / f".secrets.{os.getpid()}.{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(doc))
            try:
                if known is None:
                    os.link(tmp, self.secrets_file)
                else:  # a user added (ZooKeeper's): the known passwords stay
                    os.replace(tmp, self.secrets_file)
            except FileExistsError:  # another process was first: its passwords stand
                pass
        finally:
            tmp.unlink(missing_ok=True)

    def security_config(self, user: str = "fleet", password: str | None = None,
                        mechanism: str = SECURED_MECHANISM) -> dict:
        """librdkafka security settings to log in to a secured lab as `user` ({} for an open lab;
        a 0.9 mTLS lab: the user's client certificate); `mechanism`: SCRAM-SHA-512 or PLAIN."""
        if not self.secured:
            return {}
        if self.mtls:
            cert, key = self.client_cert(user)
            return {"security.protocol": "SSL", "ssl.ca.location": str(self.tls_dir / "ca.pem"),
                    "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism, "sasl.username": user,
                "sasl.password": password if password is not None else self.passwords()[user],
                "ssl.ca.location": str(self.tls_dir / "ca.pem")}

    @property
    def jwks_url(self) -> str:
        """Secured labs: the JSON Web Key Set of the lab's OAuth issuer, as the brokers read it."""
        return oauth.jwks_file(self.tls_dir).resolve().as_uri()

    def oauth_config(self, user: str = "fleet") -> dict:
        """librdkafka settings to log in to a secured lab as `user` with SASL/OAUTHBEARER, the token
        coming from fleetlab.oauth.token (a dotted path: the apache-kafka provider resolves it)."""
        if self.security != "sasl_ssl" or not self.secured:
            return {}
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.config": f"principal={user} issuer_key={oauth.issuer_key(self.tls_dir).resolve()}",
                "oauth_cb": "fleetlab.oauth.token", "ssl.ca.location": str(self.tls_dir / "ca.pem")}

    def controller_port(self, node_id: int) -> int:
        return (self.controller_base_port or self.broker_base_port + 50) + node_id

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host(i)}:{self.broker_port(i)}" for i in range(self.brokers))

    @property
    def zk_hosts(self) -> str:
        return f"127.0.0.1:{self.zk_port}"

    def broker_dir(self, broker_id: int) -> Path:
        return self.path / f"broker-{broker_id}"

    def log_dir(self, broker_id: int) -> Path:
        return self.broker_dir(broker_id) / "data"

    @property
    def conn_prefix(self) -> str:
        return self.name.replace("-", "_").replace(".", "_")

    @property
    def kafka_conn_id(self) -> str:
        return f"{self.conn_prefix}_kafka"

    @property
    def runbook_kafka_conn_id(self) -> str:
        """Secured labs: the Kafka connection of the destructive runbooks (user `fleet-runbook`)."""
        return f"{self.conn_prefix}_kafka_runbook"

    @property
    def zk_conn_id(self) -> str:
        return f"{self.conn_prefix}_zookeeper"

    @property
    def zk_runbook_conn_id(self) -> str:
        """ZooKeeper with SASL: the runbooks' ZooKeeper connection (ZK_USER, the brokers' user)."""
        return f"{self.conn_prefix}_zookeeper_runbook"

    def zk_login(self, user: str = ZK_USER) -> dict:
        """KazooClient keyword arguments to log in to this lab's ZooKeeper as `user` (SASL
        DIGEST-MD5; {} for an open ZooKeeper)."""
        if not self.zk_sasl:
            return {}
        return {"sasl_options": {"mechanism": "DIGEST-MD5", "username": user,
                                 "password": self.passwords()[f"zookeeper:{user}"]}}

    def zk_client(self, chroot: str | None = None, *, user: str = ZK_USER, start: bool = True, **kwargs):
        """THE kazoo client of the lab's own helpers and the tests (seeding, fault injection): logged
        in as `user` (default ZK_USER, the brokers' user: it may write anything) where ZooKeeper
        requires SASL; `chroot` None: the lab's chroot ("" for ZooKeeper's root). Started unless
        start=False; the caller stops and closes it."""
        from kazoo.client import KazooClient

        if self.kraft:
            raise LabError(f"{self.name} runs Kafka {self.kafka_version} in KRaft mode: it has no ZooKeeper")
        kwargs.setdefault("timeout", 10)
        zk = KazooClient(hosts=f"{self.zk_hosts}{self.chroot if chroot is None else chroot}",
                         **self.zk_login(user), **kwargs)
        if start:
            zk.start(timeout=15)
        return zk

    def client_config(self, extra: dict | None = None) -> dict:
        """librdkafka settings for this cluster (0.9's protocol fallbacks only where they belong)."""
        from fleetkit.clients.kafka import client_config

        return client_config({"bootstrap.servers": self.bootstrap, **self.security_config("admin"), **(extra or {})},
                             self.kafka_version)

    def connection_env(self) -> dict[str, str]:
        """AIRFLOW_CONN_* variables defining this cluster's Kafka (and ZooKeeper) connections. A
        secured lab has two Kafka connections: kafka_conn_id logs in as the read-only `fleet` user,
        runbook_kafka_conn_id as `fleet-runbook` (the destructive runbooks' principal)."""
        def kafka(user: str) -> str:
            return json.dumps({"conn_type": "kafka",
                               "extra": {"bootstrap.servers": self.bootstrap, **self.security_config(user)}})

        env = {f"AIRFLOW_CONN_{self.kafka_conn_id.upper()}": kafka("fleet")}
        if self.secured:
            env[f"AIRFLOW_CONN_{self.runbook_kafka_conn_id.upper()}"] = kafka("fleet-runbook")
        if not self.kraft:
            def zookeeper(user: str | None) -> str:
                zk = {"conn_type": "zookeeper", "host": "127.0.0.1", "port": self.zk_port}
                if user:
                    zk.update({"login": user, "password": self.passwords()[f"zookeeper:{user}"],
                               "extra": {"auth": "sasl"}})
                return json.dumps(zk)

            if self.zk_sasl:  # reads as ZK_READ_USER, runbooks as the brokers' ZK_USER (see ZK_USER)
                env[f"AIRFLOW_CONN_{self.zk_conn_id.upper()}"] = zookeeper(ZK_READ_USER)
                env[f"AIRFLOW_CONN_{self.zk_runbook_conn_id.upper()}"] = zookeeper(ZK_USER)
            else:
                env[f"AIRFLOW_CONN_{self.zk_conn_id.upper()}"] = zookeeper(None)
        if self.broker_ssh:  # one ssh connection per broker host: the client key's file, the host key pinned
            for i in range(self.brokers):
                sshd = self.sshd(i)
                sshd.ensure_keys()
                env[f"AIRFLOW_CONN_{self.ssh_conn_id(i).upper()}"] = sshd.connection_json()
        return env

    def cleaner_settings(self) -> dict:
        return {
            "dedupe_buffer_size": int(self.broker_props(0)["log.cleaner.dedupe.buffer.size"]),
            "threads": int(self.broker_props(0)["log.cleaner.threads"]),
            "io_buffer_load_factor": float(self.broker_props(0)["log.cleaner.io.buffer.load.factor"]),
        }

    def fleet_cluster(self) -> dict:
        """This cluster's entry of a fleet file (log dirs absolute); runbooks stop, start and
        reconfigure its brokers with the repository's fleetlab (broker_control)."""
        def literal(text: str) -> str:  # braces are placeholders in broker_control commands
            return text.replace("{", "{{").replace("}", "}}")

        def fleetlab(command: str, *extra: str) -> list[str]:
            return [literal(str(REPO_ROOT / ".venv" / "bin" / "fleetlab")), command,
                    "--lab-dir", literal(str(self.path.absolute())), "{broker}", *extra]

        entry = {
            "name": self.name,
            "kafka_version": self.kafka_version,
            "kafka_conn_id": self.kafka_conn_id,
        }
        if self.secured:  # the runbooks' own principal (fleet-runbook)
            entry["runbook_kafka_conn_id"] = self.runbook_kafka_conn_id
        if not self.kraft:
            entry["zookeeper"] = {"conn_id": self.zk_conn_id, "chroot": self.chroot}
            if self.zk_sasl:
                entry["zookeeper"]["runbook_conn_id"] = self.zk_runbook_conn_id
        entry["offsets_topic_partitions"] = OFFSETS_PARTITIONS
        if not self.modern:  # 0.9 cannot report its cleaner settings (no DescribeConfigs)
            entry["cleaner"] = self.cleaner_settings()
        entry["brokers"] = [{"id": i, "log_dirs": [str(self.log_dir(i))],
                             **({"access": "ssh", "ssh_conn_id": self.ssh_conn_id(i)} if self.broker_ssh
                                else {"access": "local"})}
                            for i in range(self.brokers)]
        entry["broker_control"] = {"stop": fleetlab("stop-broker"), "start": fleetlab("start-broker"),
                                   "set_config": fleetlab("broker-config", "{key}={value}")}
        return entry

    def fleet_document(self) -> dict:
        """A fleet file holding this one cluster."""
        return {"version": 1, "clusters": [self.fleet_cluster()]}

    def _common_props(self) -> dict[str, str]:
        rf = min(3, self.brokers)
        return {
            "num.partitions": "3",
            "default.replication.factor": "1",
            "auto.create.topics.enable": "true",
            "delete.topic.enable": "true",
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "auto.leader.rebalance.enable": "false",
            "controlled.shutdown.enable": "true",
            "log.cleaner.enable": "true",
            # 32 MiB keeps three brokers within their 512 MiB heaps (the 128 MiB default would
            # take a quarter of each); the fleet file states it for 0.9, which cannot report it.
            "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
            "log.cleaner.threads": "1",
            "log.cleaner.io.buffer.load.factor": "0.9",
            "log.retention.check.interval.ms": "10000",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "group.min.session.timeout.ms": "3000",
        }

    def broker_props(self, broker_id: int) -> dict[str, str]:
        port = self.broker_port(broker_id)
        props = {"log.dirs": str(self.log_dir(broker_id))}
        props.update(self._common_props())
        if not self.modern:  # 0.9.0.1
            props.update({
                "broker.id": str(broker_id),
                "host.name": "127.0.0.1",
                "port": str(port),
                "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "advertised.host.name": "127.0.0.1",
                "advertised.port": str(port),
                "zookeeper.connect": f"{self.zk_hosts}{self.chroot}",
                "zookeeper.connection.timeout.ms": "10000",
                "zookeeper.session.timeout.ms": "10000",
                "controlled.shutdown.max.retries": "2",
                "controlled.shutdown.retry.backoff.ms": "1000",
            })
            if self.secured:
                for k in ("host.name", "port", "advertised.host.name", "advertised.port"):
                    props.pop(k)
                props.update(self._mtls_props(broker_id))
        else:
            rf = min(3, self.brokers)
            if self.kraft and self.offsets_segment_bytes < 1024 * 1024:  # Kafka 4 refuses the topic otherwise
                raise LabError(f"{self.name}: offsets_segment_bytes {self.offsets_segment_bytes} is below Kafka "
                               f"{self.kafka_version}'s minimum segment.bytes of 1048576 (1 MiB)")
            props.update({
                "offsets.topic.segment.bytes": str(self.offsets_segment_bytes),
                "transaction.state.log.replication.factor": str(rf),
                "transaction.state.log.min.isr": "1",
                # a group's first join completes at once, as on 0.9 (the default waits 3 s)
                "group.initial.rebalance.delay.ms": "0",
                # an idle follower asks its leader every 5 s instead of every 0.5 s (half of an idle
                # broker's CPU); data appended still answers a waiting fetch at once. Not on 0.9:
                # its followers leave the ISR after 10 s without catching up (replica.lag.time.max.ms,
                # 30 s since 2.5), and a leader move on a busy machine then left one with an ISR of one
                "replica.fetch.wait.max.ms": "5000",
            })
            if self.kraft:
                voters = ",".join(f"{i}@{self.host(i)}:{self.controller_port(i)}" for i in range(self.brokers))
                props.update({
                    "process.roles": "broker,controller",
                    "node.id": str(broker_id),
                    "controller.quorum.voters": voters,
                    "controller.listener.names": "CONTROLLER",
                    "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{self.controller_port(broker_id)}",
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "inter.broker.listener.name": "PLAINTEXT",
                    # the consumer group protocol (KIP-848) next to the classic one; its broker-side
                    # session and heartbeat minimums lowered so lab consumers fail over in seconds
                    "group.coordinator.rebalance.protocols": "classic,consumer",
                    "group.consumer.min.session.timeout.ms": "3000",
                    "group.consumer.session.timeout.ms": "10000",
                    "group.consumer.min.heartbeat.interval.ms": "500",
                    "group.consumer.heartbeat.interval.ms": "1000",
                })
                if self.secured:
                    props.update(self._secured_props(broker_id))
            else:
                props.update({
                    "broker.id": str(broker_id),
                    "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                    "zookeeper.connect": f"{self.zk_hosts}{self.chroot}",
                    "zookeeper.connection.timeout.ms": "10000",
                    "zookeeper.session.timeout.ms": "10000",
                })
                if self.secured:
                    props.update(self._secured_props(broker_id))
                if self.zk_sasl:  # the login comes from the JAAS file's Client section
                    props["zookeeper.set.acl"] = "true"
        props.update({k: str(v) for k, v in self.broker_overrides.items()})
        return props

    def _secured_props(self, node_id: int) -> dict[str, str]:
        port, internal = self.broker_port(node_id), self.internal_port(node_id)
        pem, host = self.tls_dir / "broker.pem", self.host(node_id)
        inner = "SSL" if self.on_hosts else "PLAINTEXT"  # across the lab's network: mutual TLS
        listeners = f"SASL_SSL://{host}:{port},INTERNAL://{host}:{internal}"
        protocols = f"SASL_SSL:SASL_SSL,INTERNAL:{inner}"
        if self.kraft:
            listeners += f",CONTROLLER://{host}:{self.controller_port(node_id)}"
            protocols += f",CONTROLLER:{inner}"
            authorizer = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        else:  # ZooKeeper mode: the ACLs live in ZooKeeper
            authorizer = "kafka.security.authorizer.AclAuthorizer"
        return {
            "listeners": listeners,
            "advertised.listeners": f"SASL_SSL://{host}:{port},INTERNAL://{host}:{internal}",
            "listener.security.protocol.map": protocols,
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": f"{SECURED_MECHANISM},PLAIN,OAUTHBEARER",
            # SCRAM credentials live in the cluster (ZooKeeper or the metadata log): the server's
            # login module needs no options
            f"listener.name.sasl_ssl.{SECURED_MECHANISM.lower()}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            # PLAIN: the same users and passwords, listed in the server's login module (the reason
            # server.properties is private to its owner, like secrets.json)
            "listener.name.sasl_ssl.plain.sasl.jaas.config":
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                + " ".join(f'user_{u}="{self.passwords()[u]}"' for u in SECURED_USERS) + ";",
            # OAUTHBEARER: signed JWTs of the lab's issuer (fleetlab.oauth), checked against its JWKS
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            "sasl.oauthbearer.jwks.endpoint.url": self.jwks_url,
            "sasl.oauthbearer.expected.issuer": oauth.ISSUER,
            "sasl.oauthbearer.expected.audience": oauth.AUDIENCE,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pem),
            "ssl.client.auth": "none",
            "authorizer.class.name": authorizer,
            "allow.everyone.if.no.acl.found": "false",
            # the inter-broker (and KRaft's controller) listeners are PLAINTEXT on loopback, where
            # brokers, controllers and the lab's user set-up are ANONYMOUS (lab only)
            "super.users": "User:admin;User:ANONYMOUS",
            **(self._node_tls_props() if self.on_hosts else {}),
        }

    def _node_tls_props(self) -> dict[str, str]:
        """The several-hosts profile: INTERNAL and CONTROLLER are SSL with client certificates (the
        nodes' own, NODE_CN, signed by the lab CA, a super user), so no node listener is open to
        the lab's network without one; ANONYMOUS is no longer anyone's."""
        return {
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls_dir / "ca.pem"),
            "listener.name.internal.ssl.client.auth": "required",
            "listener.name.controller.ssl.client.auth": "required",
            "super.users": f"User:admin;{self.node_principal}",
        }

    def _mtls_props(self, broker_id: int) -> dict[str, str]:
        """0.9 with mutual TLS (see SSL_USERS): SSL for clients, PLAINTEXT between brokers on loopback."""
        port, internal = self.broker_port(broker_id), self.internal_port(broker_id)
        password = self.passwords()["tls:keystore"]
        listeners = f"SSL://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{internal}"
        return {
            "listeners": listeners,
            "advertised.listeners": listeners,
            "security.inter.broker.protocol": "PLAINTEXT",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.tls_dir / "keystore.p12"),
            "ssl.keystore.password": password,
            "ssl.key.password": password,
            "ssl.truststore.type": "JKS",
            "ssl.truststore.location": str(self.tls_dir / "truststore.jks"),
            "ssl.truststore.password": password,
            "ssl.client.auth": "required",
            "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            # ANONYMOUS: every PLAINTEXT connection, i.e. the brokers' replication and controller
            # traffic on the loopback listener (and the lab's own checks there)
            "super.users": f"{ssl_principal('admin')};User:ANONYMOUS",
        }

    def save(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "lab.json").write_text(json.dumps(asdict(self), indent=1, sort_keys=True))

    @classmethod
    def load(cls, lab_dir: str | os.PathLike) -> "LabSpec":
        f = Path(lab_dir) / "lab.json"
        if f.exists():
            known = {fl.name for fl in fields(cls)}
            return cls(**{k: v for k, v in json.loads(f.read_text()).items() if k in known})
        return cls(lab_dir=str(Path(lab_dir).resolve()))


def fleet_specs(root: str | os.PathLike = REPO_ROOT / ".lab", plan: ports.PortPlan = ports.DEMO,
                suffix: str = "") -> dict[str, LabSpec]:
    """The lab fleet: one LabSpec per cluster of fleetlab.ports.CLUSTERS, in <root>/<name>; the
    3.9 and 4.3 clusters are secured with SASL_SSL (SCRAM, ACLs), the 0.9 one with mutual TLS (ACLs);
    3.9's ZooKeeper requires a SASL login (zk_security). The test fleet
    names its clusters with a suffix (labtest, lab39test, lab43test)."""
    out = {}
    for base, (version, _mode, _slot) in ports.CLUSTERS.items():
        name = base + suffix
        saved = Path(root) / name / "lab.json"
        spec = LabSpec.load(saved.parent) if saved.exists() else LabSpec(lab_dir=str(Path(root) / name), name=name)
        spec.lab_dir = str(Path(root) / name)
        spec.name, spec.kafka_version = name, version
        for key, value in plan.cluster(base).items():
            setattr(spec, key, value)
        # secured like production: SASL_SSL on 3.x/4.x, mutual TLS on 0.9 (its SASL is Kerberos only)
        spec.security = "sasl_ssl" if spec.modern else "ssl"
        # and a ZooKeeper that requires a login where it is 3.8 (3.4.6, 0.9's, stays open)
        spec.zk_security = "sasl" if spec.modern and not spec.kraft else ""
        out[name] = spec
    return out
