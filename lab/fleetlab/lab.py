"""The lab fleet: real Apache Kafka clusters of three generations (and their ZooKeepers) on loopback.

- `lab`: Kafka 0.9.0.1 in ZooKeeper mode (ZooKeeper 3.4.6), the generation of the seed incidents;
- `lab39`: Kafka 3.9.2 in ZooKeeper mode with its own ZooKeeper 3.8 (the last ZooKeeper generation);
- `lab43`: Kafka 4.3.1 in KRaft mode: combined broker+controller nodes, storage formatted with
  Kafka's storage tool, the consumer group protocol (KIP-848) enabled next to the classic one.

Every cluster of the lab fleet is secured as production clusters are (fleet_specs): `lab39` and
`lab43` with SASL_SSL, SCRAM and ACLs (LabSpec.security = "sasl_ssl": see the notes above
SECURED_USERS and SECURED_ACLS below), `lab` (0.9, whose SASL is Kerberos only) with mutual TLS and
ACLs (LabSpec.security = "ssl": client certificates whose subjects are the principals,
User:CN=fleet,O=fleetlab; see the notes above SSL_USERS and SSL_ACLS). Either way brokers talk to
each other on a PLAINTEXT loopback listener at broker port + 25 as User:ANONYMOUS, a super user: the
lab's admin door, acceptable on 127.0.0.1 only. Single-purpose labs are open unless their LabSpec
says otherwise. See above ZK_USER for the ZooKeeper of `lab39`, which requires a SASL login
(LabSpec.zk_security = "sasl", the default of fleet_specs for the ZooKeeper-mode 3.x cluster;
LabSpec.zk_client() is the one authenticated kazoo client of a lab).

Distributions come from fleetlab.dists (versions and checksums in one place). Processes are
launched with `java -cp 'libs/*' ...` directly (the shipped scripts of 0.9 pass GC flags Java 17
rejects; the Maven jars come without scripts). Everything binds 127.0.0.1 (or, with
LabSpec.broker_hosts, each node its own lab host's address: fleetlab.hosts), keeps a PID file under
its lab folder, and stops by PID (SIGTERM, then SIGKILL after a timeout). Ports come from
fleetlab.ports; several labs run side by side with different folders and ports (the demo fleet
and the test fleet, say).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from fleetlab import dists, oauth, ports, procs
from fleetkit.core.kafka_names import DEFAULT_OFFSETS_PARTITIONS as OFFSETS_PARTITIONS
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.errors import LabError

log = logging.getLogger(__name__)

from fleetlab.paths import CHECKOUT as REPO_ROOT  # noqa: E402
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
#: the generation of the single-cluster labs tests and benchmarks start for themselves
KAFKA_VERSION = "0.9.0.1"


#: The secured mode of a lab (LabSpec.security = "sasl_ssl"; Kafka 3.x in ZooKeeper mode and 4.x in
#: KRaft mode, the default of the lab fleet's lab39 and lab43), as production clusters run:
#:
#: - clients connect to SASL_SSL on the broker ports (SCRAM-SHA-512; TLS with a lab CA and a broker
#:   certificate for 127.0.0.1 / localhost, generated at the first start under <lab>/tls, never
#:   committed; the broker reads them as PEM). Unauthenticated clients have no listener to use.
#: - brokers talk to each other on INTERNAL (PLAINTEXT, broker_base + 25 + node id) and, in KRaft
#:   mode, to the controllers on CONTROLLER (PLAINTEXT), loopback only. Those connections
#:   authenticate as User:ANONYMOUS, which is therefore a super user: acceptable in a lab on
#:   127.0.0.1, never in production (there: SSL or SASL on the inter-broker and controller
#:   listeners too). The lab's own start-up checks and user set-up use INTERNAL the same way.
#: - An authorizer with allow.everyone.if.no.acl.found=false: nothing without an ACL
#:   (StandardAuthorizer in KRaft mode, AclAuthorizer with the ACLs in ZooKeeper in ZooKeeper mode).
#:   super.users: User:admin and User:ANONYMOUS (the loopback INTERNAL / CONTROLLER listeners).
#: - SCRAM users with random passwords generated at the first use of the lab (its start, or its
#:   connection settings asked for before) and kept in <lab>/secrets.json (mode 0600, never
#:   printed): `admin` (super user: the lab's own admin, producers and committers), `fleet` (the
#:   toolkit's read-only principal: connection_env()'s Kafka connection logs in as it) and
#:   `fleet-runbook` (the destructive runbooks' principal: connection_env()'s runbook connection).
#:   They are created at every start, once the brokers answer, through INTERNAL with
#:   AdminClient.alter_user_scram_credentials (AlterUserScramCredentials, KIP-554: in ZooKeeper in
#:   ZooKeeper mode, in the metadata log in KRaft mode): no password on any command line or in a
#:   log. KRaft needs no user at format time (the controllers authenticate nobody).
#: - SASL/PLAIN too, on the same listener, for the same users and passwords (PlainLoginModule's
#:   user_<name> options in server.properties, which is therefore written 0600 like secrets.json):
#:   LabSpec.security_config(user, mechanism="PLAIN").
#: - SASL/OAUTHBEARER too, on the same listener: JWTs signed by the lab's own issuer
#:   (fleetlab.oauth: an RSA key and its JWKS under <lab>/tls), validated by Kafka's
#:   OAuthBearerValidatorCallbackHandler (signature, issuer, audience, expiry); a token's `sub` is
#:   its principal, so a token for `fleet` has the ACLs of `fleet` (LabSpec.oauth_config).
#: - ACLs created after that by `admin` (AdminClient.create_acls), all ALLOW from any host:
SECURED_USERS = ("admin", "fleet", "fleet-runbook")
SECURED_ACLS: dict[str, list[tuple[str, str, str]]] = {
    # (resource type, literal resource name, operation)
    "fleet": [
        ("cluster", "kafka-cluster", "DESCRIBE"),        # DescribeLogDirs, DescribeQuorum, ListGroups
        ("cluster", "kafka-cluster", "DESCRIBE_CONFIGS"),  # cleaner settings
        ("group", "*", "DESCRIBE"),                      # FindCoordinator, DescribeGroups, OffsetFetch
        ("topic", "*", "DESCRIBE"),                      # Metadata, ListOffsets, OffsetFetch
        ("topic", "*", "DESCRIBE_CONFIGS"),
        ("topic", OFFSETS_TOPIC, "READ"),                # the __consumer_offsets reader (Fetch)
        # Fetch of the record at a group's committed offset, for its timestamp (the time lag:
        # KafkaCluster.record_timestamps, a consumer without a group; payloads are not looked at)
        ("topic", "*", "READ"),
    ],
    "fleet-runbook": [
        ("cluster", "kafka-cluster", "DESCRIBE"),
        ("cluster", "kafka-cluster", "DESCRIBE_CONFIGS"),
        ("cluster", "kafka-cluster", "ALTER"),           # partition reassignments (leadership moves)
        ("cluster", "kafka-cluster", "ALTER_CONFIGS"),   # broker settings (cleaner buffer)
        ("group", "*", "DESCRIBE"),
        ("group", "*", "READ"),                          # OffsetCommit (offset resets)
        ("topic", "*", "DESCRIBE"),
        ("topic", "*", "DESCRIBE_CONFIGS"),
        ("topic", "*", "READ"),                          # OffsetCommit needs Read on the topic
    ],
}
SECURED_MECHANISM = "SCRAM-SHA-512"
#: the several-hosts profile: the common name of the nodes' certificate (server and inter-node
#: client) and of the lab's own inter-node client certificate
NODE_CN = "fleetlab-node"

#: The mutual-TLS mode of a Kafka 0.9 lab (LabSpec.security = "ssl"; 0.9's SASL is Kerberos only):
#:
#: - clients connect to an SSL listener on the broker ports (listeners=SSL://127.0.0.1:p) that
#:   requires a client certificate (ssl.client.auth=required) signed by the lab CA. 0.9 reads no
#:   PEM: the broker's key and chain go into <lab>/tls/keystore.p12 (PKCS#12, which 0.9 on Java 17
#:   loads as ssl.keystore.type=PKCS12) and the CA into <lab>/tls/truststore.jks (keytool); their
#:   random password is in secrets.json ("tls:keystore") and in server.properties (mode 0600: 0.9
#:   reads ssl.keystore.password from there), never on a command line.
#: - brokers talk to each other on a PLAINTEXT loopback listener at broker port + 25 (0.9 has no
#:   listener names: PLAINTEXT://127.0.0.1:p+25 and security.inter.broker.protocol=PLAINTEXT).
#:   0.9 calls every PLAINTEXT connection User:ANONYMOUS, a super user here so that replication and
#:   the controller work: that loopback listener is the lab's admin door (as INTERNAL is on the
#:   modern labs), acceptable on 127.0.0.1 only.
#: - kafka.security.auth.SimpleAclAuthorizer with allow.everyone.if.no.acl.found=false.
#: - client certificates (PEM; key 0600, unencrypted) for SSL_USERS in <lab>/tls/<user>.pem / .key.
#:   0.9's DefaultPrincipalBuilder names a connection by its certificate's X.500 subject (RFC 2253):
#:   the principal of `fleet` is User:CN=fleet,O=fleetlab (ssl_principal). `admin` is a super user.
#: - SSL_ACLS written into ZooKeeper in SimpleAclAuthorizer's format (/kafka-acl/<type>/<name> and a
#:   /kafka-acl-changes notification, what kafka.admin.AclCommand writes) before the brokers start.
#:   Not through AclCommand: its command line refuses Describe on the cluster and on groups in 0.9
#:   (only Create / ClusterAction / All on the cluster, Read / All on groups), which the authorizer
#:   itself honours.
SSL_USERS = SECURED_USERS
SSL_ORG = "fleetlab"
#: What 0.9's KafkaApis asks of each request the toolkit sends (Read or Write on a resource implies
#: Describe there): Metadata, Offsets (ListOffsets) - Describe on the topic; GroupCoordinator,
#: DescribeGroups - Describe on the group; OffsetFetch - READ on the group (0.9 asks for Read, later
#: versions for Describe) and Describe on the topic; ListGroups - Describe on the cluster; Fetch -
#: Read on the topic; OffsetCommit - Read on the group and on the topic. So on 0.9 the read-only
#: principal holds Read on groups; it still cannot commit, lacking Read on the data topics.
SSL_ACLS: dict[str, list[tuple[str, str, str]]] = {
    # (0.9's resource type, literal resource name, 0.9's operation)
    "fleet": [
        ("Cluster", "kafka-cluster", "Describe"),   # ListGroups
        ("Group", "*", "Read"),                     # OffsetFetch (Read), GroupCoordinator, DescribeGroups
        ("Topic", "*", "Describe"),                 # Metadata, Offsets, OffsetFetch
        ("Topic", OFFSETS_TOPIC, "Read"),           # the __consumer_offsets reader (Fetch)
    ],
    "fleet-runbook": [
        ("Cluster", "kafka-cluster", "Describe"),
        ("Group", "*", "Read"),                     # OffsetFetch, OffsetCommit (offset resets)
        ("Topic", "*", "Describe"),
        ("Topic", "*", "Read"),                     # OffsetCommit; the record at a committed offset
    ],
}


def ssl_principal(user: str) -> str:
    """The principal 0.9 gives the lab's client certificate of `user`."""
    return f"User:CN={user},O={SSL_ORG}"


#: ZooKeeper with SASL (LabSpec.zk_security = "sasl"; ZooKeeper-mode 3.x labs, whose ZooKeeper is
#: 3.8; fleet_specs sets it for lab39, as production runs): the server requires a DIGEST-MD5 login
#: from every client (enforce.auth.enabled, enforce.auth.schemes=sasl); its JAAS Server section
#: (<lab>/zookeeper/jaas.conf, 0600) holds the users ZK_USERS, passwords in secrets.json
#: ("zookeeper:<user>"). Brokers log in as ZK_USER (Client section of <lab>/broker-jaas.conf, 0600,
#: given as -Djava.security.auth.login.config, never the password itself) and set
#: zookeeper.set.acl=true: their znodes give sasl:kafka all rights and the world READ (Kafka's
#: sensitive paths, /config/users and the like, no world READ; /consumers stays open for old
#: consumers). The toolkit's connections (connection_env):
#:   * <cluster>_zookeeper, the scheduled reads: ZK_READ_USER, which owns no znode and reads through
#:     the world-READ entries;
#:   * <cluster>_zookeeper_runbook (the fleet file's zookeeper.runbook_conn_id): ZK_USER, the
#:     brokers' own user, as Kafka's own ZooKeeper tools log in: move_leader creates
#:     /admin/reassign_partitions, and /admin gives CREATE to sasl:kafka only.
ZK_USER = "kafka"
ZK_READ_USER = "fleet"
ZK_USERS = (ZK_USER, ZK_READ_USER)


def ensure_kafka_dist(version: str = KAFKA_VERSION) -> Path:
    """The distribution folder of a Kafka version, fetched and checked on first use."""
    return dists.ensure(version)


def expire_zk_session(client, hosts: str, **login) -> None:
    """Fault injection: expire a kazoo client's ZooKeeper session from outside. A second client
    attaches to the same session id and password, then closes it; the first one sees
    SESSION_EXPIRED (its watches are gone) and opens a new session. `login`: the KazooClient
    arguments of a ZooKeeper that requires one (LabSpec.zk_login())."""
    from kazoo.client import KazooClient

    sid, pwd = client.client_id
    other = KazooClient(hosts=hosts, client_id=(sid, pwd), timeout=10, **login)
    other.start(timeout=10)
    other.stop()
    other.close()


def kraft_cluster_id() -> str:
    """A random KRaft cluster id as Kafka makes them (16 bytes, URL-safe base64 without padding),
    never starting with '-': the storage tool's argument parser would read it as an option (Kafka's
    own Uuid.randomUuid draws again in that case)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def log_grown_since(path: Path, then: os.stat_result | None, limit: int = 8 << 20) -> bytes:
    """What a log file gained since `then` (its stat then, None if it did not exist), across an
    hourly roll-over (log4j renames server.log to server.log.<date-hour> and starts a new one): the
    rest of the renamed file (found by its inode) and the whole new one. At most `limit` bytes of each."""
    try:
        now = path.stat()
    except OSError:
        return b""
    if then is None:
        return path.read_bytes()[:limit]
    if now.st_ino == then.st_ino and now.st_dev == then.st_dev:
        with open(path, "rb") as f:
            f.seek(then.st_size)
            return f.read(limit)
    grown = b""
    for rolled in path.parent.glob(path.name + ".*"):
        try:
            if rolled.stat().st_ino == then.st_ino:
                with open(rolled, "rb") as f:
                    f.seek(then.st_size)
                    grown = f.read(limit)
                break
        except OSError:
            continue
    with open(path, "rb") as f:
        return grown + f.read(limit)


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


class Lab:
    def __init__(self, spec: LabSpec | None = None):
        self.spec = spec or LabSpec()
        self.marker = str(self.spec.path.resolve())
        self._probes: dict = {}

    # -- files -----------------------------------------------------------------------------
    def _pid_file(self, name: str) -> Path:
        return self.spec.path / "run" / f"{name}.pid"

    def _log_file(self, name: str) -> Path:
        return self.spec.path / "logs" / f"{name}.out"

    def _write_configs(self) -> None:
        s = self.spec
        (s.path / "run").mkdir(parents=True, exist_ok=True)
        if s.kraft and (not s.cluster_id or s.cluster_id.startswith("-")):
            s.cluster_id = kraft_cluster_id()
        if not s.kraft:
            (s.path / "zookeeper" / "data").mkdir(parents=True, exist_ok=True)
            zoo = (f"dataDir={s.path / 'zookeeper' / 'data'}\n"
                   f"clientPort={s.zk_port}\nclientPortAddress=127.0.0.1\n"
                   "tickTime=2000\ninitLimit=5\nsyncLimit=2\nmaxClientCnxns=0\n"
                   "autopurge.snapRetainCount=3\nautopurge.purgeInterval=1\n")
            if s.modern:  # ZooKeeper 3.5+: no admin server on 8080; four-letter words the lab uses
                zoo += "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
            if s.zk_sasl:  # every client logs in (DIGEST-MD5); the users are in the JAAS file
                zoo += ("authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n"
                        "enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n")
            (s.path / "zookeeper" / "zoo.cfg").write_text(zoo)
        for i in range(s.brokers):
            s.log_dir(i).mkdir(parents=True, exist_ok=True)
            (s.broker_dir(i) / "logs").mkdir(parents=True, exist_ok=True)
            props = "".join(f"{k}={v}\n" for k, v in s.broker_props(i).items())
            if s.secured:  # it holds the keystore password (0.9) or the PLAIN users' passwords
                from fleetlab.tls import _write_private

                _write_private(s.broker_dir(i) / "server.properties", props.encode())
            else:
                (s.broker_dir(i) / "server.properties").write_text(props)
        if s.secured:
            self._write_secrets()
        if s.zk_sasl:
            self._write_zk_jaas()
        (s.path / "log4j.properties").write_text(LOG4J)
        (s.path / "log4j2.properties").write_text(LOG4J2)
        s.save()

    @property
    def zk_jaas_file(self) -> Path:
        return self.spec.path / "zookeeper" / "jaas.conf"

    @property
    def broker_jaas_file(self) -> Path:
        return self.spec.path / "broker-jaas.conf"

    def _write_zk_jaas(self) -> None:
        """ZooKeeper with SASL: the server's JAAS file (its users) and the brokers' (their login), 0600."""
        from fleetlab.tls import _write_private

        passwords = self.spec.passwords()
        users = "".join(f'\n  user_{u}="{passwords[f"zookeeper:{u}"]}"' for u in ZK_USERS)
        _write_private(self.zk_jaas_file, (
            f"Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required{users};\n}};\n").encode())
        _write_private(self.broker_jaas_file, (
            "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  username="{ZK_USER}"\n  password="{passwords[f"zookeeper:{ZK_USER}"]}";\n}};\n').encode())

    def _write_secrets(self) -> None:
        """Secured labs: the users' passwords (0600) and the lab CA / broker certificate, once."""
        from fleetlab import tls

        s = self.spec
        s.ensure_passwords()
        names = (NODE_CN, *(s.host(i) for i in range(s.brokers)), "127.0.0.1", "localhost")
        hosts_file = s.tls_dir / "node-hosts"
        if s.on_hosts and (s.tls_dir / "broker.pem").exists() and (
                not hosts_file.exists() or hosts_file.read_text().split() != list(names)):
            # the nodes' hosts got other addresses (another subnet, another layout): the node
            # certificate names the old ones, so it is issued again by the same CA
            tls.make_server_cert(s.tls_dir, s.tls_dir / "ca.pem", s.tls_dir / "ca.key", names)
            hosts_file.write_text("\n".join(names) + "\n")
        if not (s.tls_dir / "broker.pem").exists():
            ca_pem, ca_key = tls.make_ca(s.tls_dir, f"fleetlab CA of {s.name}")
            if s.on_hosts:  # one certificate for every node: its name, then every node's address
                tls.make_server_cert(s.tls_dir, ca_pem, ca_key, names)
                hosts_file.write_text("\n".join(names) + "\n")
                tls.make_client_cert(s.tls_dir, ca_pem, ca_key, {"CN": NODE_CN}, "node-client")
            else:
                tls.make_server_cert(s.tls_dir, ca_pem, ca_key)
        if s.mtls:  # 0.9: Java stores, and the users' client certificates
            ca_pem, ca_key = s.tls_dir / "ca.pem", s.tls_dir / "ca.key"
            if not (s.tls_dir / "truststore.jks").exists():
                tls.make_java_stores(s.tls_dir, s.tls_dir / "broker.pem", ca_pem, s.passwords()["tls:keystore"])
            for user in SSL_USERS:
                if not s.client_cert(user)[0].exists():
                    tls.make_client_cert(s.tls_dir, ca_pem, ca_key, {"CN": user, "O": SSL_ORG}, user)
        else:  # SASL_SSL: OAUTHBEARER tokens of the lab's issuer too
            oauth.ensure_issuer(s.tls_dir)

    def internal_admin(self, broker_id: int | None = None, **extra):
        """Secured labs: an AdminClient on the PLAINTEXT INTERNAL listener(s), where the lab is
        User:ANONYMOUS (a super user): needs no password, so it works before any user exists."""
        from confluent_kafka.admin import AdminClient

        from fleetkit.clients.kafka import client_config

        ids = range(self.spec.brokers) if broker_id is None else [broker_id]
        tls_login = {}
        if self.spec.on_hosts:  # INTERNAL is mutual TLS there: the lab logs in as a node
            tls_login = {"security.protocol": "SSL", "ssl.ca.location": str(self.spec.tls_dir / "ca.pem"),
                         "ssl.certificate.location": str(self.spec.tls_dir / "node-client.pem"),
                         "ssl.key.location": str(self.spec.tls_dir / "node-client.key")}
        return AdminClient(client_config({"bootstrap.servers": ",".join(f"{self.spec.host(i)}:{self.spec.internal_port(i)}"
                                                                        for i in ids), **tls_login, **extra},
                                         self.spec.kafka_version))

    def create_users(self) -> None:
        """Secured labs: the SCRAM credentials of SECURED_USERS (AlterUserScramCredentials through
        INTERNAL, an upsert: the same at every start), then wait until `admin` logs in on every
        broker's SASL_SSL listener (credentials reach the brokers through ZooKeeper watches or the
        metadata log). The passwords travel only in that request on loopback."""
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        from fleetkit.clients import wire
        from fleetkit.clients.wire_security import Security

        passwords = self.spec.passwords()
        upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                                passwords[user].encode()) for user in SECURED_USERS]
        admin = self.internal_admin()
        for user, fut in admin.alter_user_scram_credentials(upserts, request_timeout=30).items():
            try:
                fut.result(timeout=60)
            except Exception as e:  # noqa: BLE001 - named in the LabError (never the password)
                raise LabError(f"{self.spec.name}: creating the SCRAM user {user} failed: {e}") from None
        security = Security.from_config(self.spec.security_config("admin"))

        def admin_logs_in() -> bool:
            try:
                for i in range(self.spec.brokers):
                    wire.broker_versions(f"{self.spec.host(i)}:{self.spec.broker_port(i)}", 5, security=security)
                return True
            except Exception:  # noqa: BLE001 - "authentication failed" until the credential arrives
                return False

        self._wait(f"{self.spec.name}: the admin user's login on every broker", admin_logs_in, 60)

    def write_ssl_acls(self, acls_of: dict[str, list[tuple[str, str, str]]] | None = None) -> None:
        """0.9 mTLS labs: SSL_ACLS (or `acls_of`, {user: [(type, name, operation)]}, the principals
        ssl_principal(user)) into ZooKeeper as SimpleAclAuthorizer keeps them (/kafka-acl/<type>/
        <name>: {"version": 1, "acls": [...]}, merged with what is there, written with the version
        read), each change announced under /kafka-acl-changes as AclCommand does."""
        from kazoo.exceptions import BadVersionError, NodeExistsError

        wanted: dict[tuple[str, str], list[dict]] = {}
        for user, acls in (SSL_ACLS if acls_of is None else acls_of).items():
            for rtype, name, op in acls:
                wanted.setdefault((rtype, name), []).append(
                    {"principal": ssl_principal(user), "permissionType": "Allow", "operation": op, "host": "*"})
        from kazoo.client import KazooClient

        root = KazooClient(hosts=self.spec.zk_hosts, timeout=10)  # the chroot, before the brokers make it
        root.start(timeout=15)
        try:
            root.ensure_path(self.spec.chroot or "/")
        finally:
            root.stop()
            root.close()
        zk = self.zk_client()
        try:
            zk.ensure_path("/kafka-acl-changes")
            for (rtype, name), acls in wanted.items():
                path = f"/kafka-acl/{rtype}/{name}"
                zk.ensure_path(f"/kafka-acl/{rtype}")
                for _ in range(5):
                    try:
                        if zk.exists(path):
                            data, stat = zk.get(path)
                            known = (json.loads(data or b"{}") or {}).get("acls", [])
                            merged = known + [a for a in acls if a not in known]
                            if merged == known:
                                break
                            zk.set(path, json.dumps({"version": 1, "acls": merged}).encode(), version=stat.version)
                        else:
                            zk.create(path, json.dumps({"version": 1, "acls": acls}).encode())
                        zk.create("/kafka-acl-changes/acl_changes_", f"{rtype}:{name}".encode(), sequence=True)
                        break
                    except (BadVersionError, NodeExistsError):
                        continue
        finally:
            zk.stop()
            zk.close()

    def create_acls(self) -> None:
        """Secured labs: SECURED_ACLS, created by `admin` (creating an existing ACL is a no-op)."""
        from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                           ResourceType)

        # librdkafka calls Kafka's CLUSTER resource type (4) BROKER
        types = {"cluster": ResourceType.BROKER, "group": ResourceType.GROUP, "topic": ResourceType.TOPIC}
        bindings = [AclBinding(types[rtype], name, ResourcePatternType.LITERAL, f"User:{user}",
                               "*", getattr(AclOperation, op), AclPermissionType.ALLOW)
                    for user, acls in SECURED_ACLS.items() for rtype, name, op in acls]
        admin = self.admin()
        for binding, fut in admin.create_acls(bindings, request_timeout=30).items():
            try:
                fut.result(timeout=60)
            except Exception as e:  # noqa: BLE001 - named in the LabError
                raise LabError(f"{self.spec.name}: creating ACL {binding} failed: {e}") from None

    # -- processes -------------------------------------------------------------------------
    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise LabError("java is not installed (Kafka and ZooKeeper need a JRE; Java 17 works)")
        return java

    def _logging_flags(self, logs_dir: Path) -> list[str]:
        if self.spec.dist.logging == "log4j2":
            conf = f"-Dlog4j2.configurationFile={self.spec.path / 'log4j2.properties'}"
        else:
            conf = f"-Dlog4j.configuration=file:{self.spec.path / 'log4j.properties'}"
        return [conf, f"-Dkafka.logs.dir={logs_dir}"]

    def _start_zookeeper(self, home: Path) -> None:
        if procs.owned_pid(self._pid_file("zookeeper"), self.marker):
            return
        self._check_port_free(self.spec.zk_port, "ZooKeeper")
        argv = [self._java(), "-Xmx128m", "-Djava.awt.headless=true",
                *self._logging_flags(self.spec.path / "zookeeper" / "logs"),
                *([f"-Djava.security.auth.login.config={self.zk_jaas_file}"] if self.spec.zk_sasl else []),
                "-cp", f"{home}/libs/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(self.spec.path / "zookeeper" / "zoo.cfg")]
        procs.start(argv, self._pid_file("zookeeper"), self._log_file("zookeeper"))

    def _secure_existing_znodes(self, home: Path) -> None:
        """A lab whose ZooKeeper data was made before it required SASL: its znodes still carry
        the open ACL they were created with. Kafka's own ZkSecurityMigrator (what
        zookeeper-security-migration.sh runs) sets the brokers' ACL on every one of them below the
        chroot, once (marker: zookeeper/acls-secured)."""
        marker = self.spec.path / "zookeeper" / "acls-secured"
        if marker.exists():
            return
        zk = self.spec.zk_client("")
        try:
            existed = zk.exists(self.spec.chroot) is not None
        finally:
            zk.stop()
            zk.close()
        if existed:
            argv = [self._java(), "-Xmx128m", f"-Djava.security.auth.login.config={self.broker_jaas_file}",
                    *self._logging_flags(self.spec.path / "zookeeper" / "logs"), "-cp", f"{home}/libs/*",
                    "kafka.admin.ZkSecurityMigrator", "--zookeeper.acl", "secure",
                    "--zookeeper.connect", f"{self.spec.zk_hosts}{self.spec.chroot}"]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise LabError(f"{self.spec.name}: securing the existing znodes (kafka.admin.ZkSecurityMigrator) "
                               f"failed:\n{(out.stdout + out.stderr).strip()[-2000:]}")
            log.info("%s: existing znodes below %s given the brokers' ACL", self.spec.name, self.spec.chroot)
        marker.write_text("secure\n")

    def _format_storage(self, home: Path, broker_id: int) -> None:
        """KRaft: format a node's log dir with Kafka's storage tool (cluster id, static voters), once.
        A secured lab's users are created after start (create_users), not here: no passwords on
        this command line."""
        if (self.spec.log_dir(broker_id) / "meta.properties").exists():
            return
        bdir = self.spec.broker_dir(broker_id)
        argv = [self._java(), "-Xmx256m", *self._logging_flags(bdir / "logs"), "-cp", f"{home}/libs/*",
                "kafka.tools.StorageTool", "format", f"--cluster-id={self.spec.cluster_id}",
                "--config", str(bdir / "server.properties"), "--ignore-formatted"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise LabError(f"formatting the storage of {self.spec.name} node {broker_id} failed "
                           f"(kafka.tools.StorageTool format):\n{(out.stdout + out.stderr).strip()[-2000:]}")

    def _start_broker_process(self, home: Path, broker_id: int) -> None:
        name = f"broker-{broker_id}"
        if procs.owned_pid(self._pid_file(name), self.marker):
            return
        host = self.spec.host(broker_id)
        self._check_port_free(self.spec.broker_port(broker_id), f"broker {broker_id}", host)
        if self.spec.secured:
            self._check_port_free(self.spec.internal_port(broker_id), f"inter-broker listener {broker_id}", host)
        if self.spec.kraft:
            self._check_port_free(self.spec.controller_port(broker_id), f"controller {broker_id}", host)
            self._format_storage(home, broker_id)
        bdir = self.spec.broker_dir(broker_id)
        argv = [self._java(), f"-Xmx{self.spec.broker_heap}", "-Xms64m", "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
                *self._logging_flags(bdir / "logs"),
                *([f"-Djava.security.auth.login.config={self.broker_jaas_file}"] if self.spec.zk_sasl else []),
                # the one URL OAUTHBEARER validation may read (Kafka refuses any other)
                *([f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.spec.jwks_url}"]
                  if self.spec.secured and not self.spec.mtls else []),
                "-cp", f"{home}/libs/*", "kafka.Kafka", str(bdir / "server.properties")]
        if self.spec.netns(broker_id):  # its own lab host: `ip netns exec` execs the JVM (same PID)
            argv = ["ip", "netns", "exec", self.spec.netns(broker_id), *argv]
        procs.start(argv, self._pid_file(name), self._log_file(name))

    def _check_port_free(self, port: int, what: str, host: str = "127.0.0.1") -> None:
        if procs.port_open(host, port):
            raise LabError(f"port {host}:{port} for {what} is already taken by another process "
                           f"(not this lab's {self.spec.path}); stop it or use another lab port base")

    def _wait(self, what: str, check, timeout: float, proc_name: str | None = None, give_up=None) -> bool:
        """Wait until check() (False), or give_up() (True: the caller knows what went wrong); LabError
        when the process exits otherwise or neither happens within `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return False
            if give_up is not None and give_up():
                return True
            pid = procs.read_pid(self._pid_file(proc_name)) if proc_name else None
            if proc_name and (pid is None or not procs.pid_alive(pid)):
                if give_up is not None and give_up():
                    return True
                tail = self._tail(self._log_file(proc_name))
                raise LabError(f"{what}: the process exited; last lines of {self._log_file(proc_name)}:\n{tail}")
            time.sleep(0.3)
        where = self._log_file(proc_name) if proc_name else self.spec.path / "logs"
        if proc_name and proc_name.startswith("broker-"):  # a broker writes its own log, not stdout
            where = self.spec.broker_dir(int(proc_name.split("-", 1)[1])) / "logs" / "server.log"
        tail = f"; last lines of {where}:\n{self._tail(where)}" if proc_name else f"; see {where}"
        raise LabError(f"{what}: not ready after {timeout:.0f}s{tail}")

    @staticmethod
    def _tail(path: Path, n: int = 15) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def _zk_ok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.spec.zk_port), timeout=1) as sock:
                sock.sendall(b"ruok")
                return sock.recv(8) == b"imok"
        except OSError:
            return False

    def admin(self, bootstrap: str | None = None, **extra):
        from confluent_kafka.admin import AdminClient

        from fleetkit.clients.kafka import client_config

        return AdminClient(client_config({"bootstrap.servers": bootstrap or self.spec.bootstrap,
                                          **self.spec.security_config("admin"), **extra}, self.spec.kafka_version))

    def _broker_answers(self, broker_id: int) -> bool:
        # one client per broker for the lab's lifetime: librdkafka handles created and destroyed
        # at a poll's pace, in several threads, with requests outstanding, crash it (SIGSEGV).
        # A secured lab is probed on its INTERNAL listener: its users may not exist yet.
        try:
            admin = self._probes.get(broker_id)
            if admin is None and self.spec.secured:
                admin = self._probes[broker_id] = self.internal_admin(broker_id, **{"socket.timeout.ms": 2000})
            elif admin is None:
                admin = self._probes[broker_id] = self.admin(f"{self.spec.host(broker_id)}:{self.spec.broker_port(broker_id)}",
                                                             **{"socket.timeout.ms": 2000})
            md = admin.list_topics(timeout=3)
            return broker_id in md.brokers
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False

    def zk_client(self, chroot: str | None = None, **kwargs):
        """LabSpec.zk_client: a started kazoo client, logged in where the ZooKeeper requires it."""
        return self.spec.zk_client(chroot, **kwargs)

    def create_topic(self, topic: str, partitions: int = 3, replication: int = 1, config: dict | None = None,
                     zk=None) -> bool:
        """Create a topic; False if it exists. 3.x/4.x: the Admin API's CreateTopics. 0.9 has no
        CreateTopics request: there the lab does what AdminUtils.createTopic does (config znode,
        then the assignment znode the controller acts on)."""
        if not TOPIC_NAME.fullmatch(topic):
            raise LabError(f"{topic!r} is not a legal topic name (1-249 of ASCII letters, digits, '.', '_', '-')")
        if self.spec.modern:
            return self._create_topic_admin(topic, partitions, replication, config)
        own = zk is None
        zk = zk or self.zk_client()
        try:
            if zk.exists(f"/brokers/topics/{topic}"):
                return False
            n = self.spec.brokers
            assignment = {str(p): [(p + r) % n for r in range(min(replication, n))] for p in range(partitions)}
            zk.ensure_path("/config/topics")
            if not zk.exists(f"/config/topics/{topic}"):
                zk.create(f"/config/topics/{topic}", json.dumps(
                    {"version": 1, "config": {k: str(v) for k, v in (config or {}).items()}}).encode())
            zk.ensure_path("/brokers/topics")
            zk.create(f"/brokers/topics/{topic}", json.dumps({"version": 1, "partitions": assignment}).encode())
            return True
        finally:
            if own:
                zk.stop()
                zk.close()

    def set_topic_config(self, topic: str, config: dict, zk=None) -> None:
        """Merge topic configs. 3.x/4.x: IncrementalAlterConfigs. 0.9: what `kafka.admin.ConfigCommand
        --entity-type topics --alter --add-config` does: merge into /config/topics/<topic>, then
        announce it under /config/changes so brokers apply it."""
        if self.spec.modern:
            return self._alter_topic_config_admin(topic, config)
        own = zk is None
        zk = zk or self.zk_client()
        try:
            path = f"/config/topics/{topic}"
            zk.ensure_path("/config/topics")
            current = {"version": 1, "config": {}}
            if zk.exists(path):
                current = json.loads(zk.get(path)[0] or b"{}") or current
            merged = dict(current.get("config", {}), **{k: str(v) for k, v in config.items()})
            if merged == current.get("config"):
                return
            doc = json.dumps({"version": 1, "config": merged}).encode()
            if zk.exists(path):
                zk.set(path, doc)
            else:
                zk.create(path, doc)
            zk.ensure_path("/config/changes")
            zk.create("/config/changes/config_change_", json.dumps(
                {"version": 1, "entity_type": "topics", "entity_name": topic}).encode(), sequence=True)
        finally:
            if own:
                zk.stop()
                zk.close()

    def _create_topic_admin(self, topic: str, partitions: int, replication: int, config: dict | None) -> bool:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        admin = self.admin()  # keep the handle alive until the answer
        fut = admin.create_topics([NewTopic(topic, partitions, min(replication, self.spec.brokers),
                                                   config={k: str(v) for k, v in (config or {}).items()})],
                                         operation_timeout=30)[topic]
        try:
            fut.result(timeout=60)
            return True
        except KafkaException as e:
            if e.args and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise LabError(f"creating topic {topic!r} on {self.spec.name} failed: {e}") from None

    def _alter_topic_config_admin(self, topic: str, config: dict) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in config.items()])
        admin = self.admin()
        for fut in admin.incremental_alter_configs([resource]).values():
            fut.result(timeout=60)

    def _ensure_offsets_topic_admin(self) -> None:
        """3.x/4.x create __consumer_offsets (offsets.topic.* settings) at the first FindCoordinator
        once enough brokers are up; ask for a coordinator, then wait for every leader and full ISR."""
        from fleetkit.clients import wire

        from fleetkit.clients.wire_security import Security

        rf = min(3, self.spec.brokers)
        admin = self.admin()
        security = Security.from_config(self.spec.security_config("admin")) if self.spec.secured else None

        def all_led() -> bool:
            try:  # a coordinator lookup on the wire: no librdkafka handle with requests left behind
                wire.probe(self.spec.bootstrap, ["fleetlab-warmup"], timeout=5, security=security)
            except Exception:  # noqa: BLE001 - "coordinator not available" until the topic exists
                pass
            md = admin.list_topics(OFFSETS_TOPIC, timeout=5).topics.get(OFFSETS_TOPIC)
            if md is None or md.error is not None or len(md.partitions) < OFFSETS_PARTITIONS:
                return False
            return all(p.leader >= 0 and len(p.isrs) >= rf for p in md.partitions.values())

        self._wait(f"{OFFSETS_TOPIC} leaders and ISR", all_led, 90)

    def _ensure_offsets_topic(self) -> None:
        """0.9 creates __consumer_offsets with min(replication factor, live brokers) replicas on first
        use; create it up front with every broker as a replica."""
        zk = self.zk_client()
        try:
            rf = min(3, self.spec.brokers)
            if self.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, rf,
                                 {"cleanup.policy": "compact", "compression.type": "uncompressed",
                                  "segment.bytes": self.spec.offsets_segment_bytes}, zk=zk):
                log.info("created %s with %d partitions x %d replicas", OFFSETS_TOPIC, OFFSETS_PARTITIONS, rf)
            # if a client made the broker create it first (100 MiB segments), the override still applies
            self.set_topic_config(OFFSETS_TOPIC, {"cleanup.policy": "compact",
                                                  "segment.bytes": self.spec.offsets_segment_bytes}, zk=zk)

            def all_led() -> bool:
                for p in range(OFFSETS_PARTITIONS):
                    path = f"/brokers/topics/{OFFSETS_TOPIC}/partitions/{p}/state"
                    if not zk.exists(path):
                        return False
                    state = json.loads(zk.get(path)[0])
                    if state["leader"] < 0 or len(state["isr"]) < rf:
                        return False
                return True

            self._wait(f"{OFFSETS_TOPIC} leaders and ISR", all_led, 90)
        finally:
            zk.stop()
            zk.close()

    def up(self, timeout: float = 120) -> None:
        """Start what is not running; on failure stop what this call started."""
        before = {r["component"] for r in self.status() if r["running"]}
        try:
            self._up(timeout)
        except BaseException:
            for i in reversed(range(self.spec.brokers)):
                if f"broker-{i}" not in before:
                    self.stop_broker(i, timeout=20)
            if "zookeeper" not in before:
                procs.stop(self._pid_file("zookeeper"), self.marker, timeout=20)
            raise

    def _up(self, timeout: float) -> None:
        home = ensure_kafka_dist(self.spec.kafka_version)
        self._write_configs()
        self._warn_ephemeral_ports()
        if not self.spec.kraft:
            self._start_zookeeper(home)
            self._wait(f"{self.spec.name}: ZooKeeper on 127.0.0.1:{self.spec.zk_port}", self._zk_ok, 30, "zookeeper")
            if self.spec.zk_sasl:
                self._secure_existing_znodes(home)
        if self.spec.mtls:  # the brokers' authorizer loads them at its start
            self.write_ssl_acls()
        start_checks = {}
        if self.spec.broker_ssh:  # each broker host's sshd (the toolkit reaches the brokers' files over SSH)
            for i in range(self.spec.brokers):
                self.spec.sshd(i).start()
        for i in range(self.spec.brokers):
            start_checks[i] = self._start_failure_check(i)
            self._start_broker_process(home, i)
        for i in range(self.spec.brokers):
            if self._wait(f"{self.spec.name}: broker {i} on {self.spec.host(i)}:{self.spec.broker_port(i)}",
                          lambda i=i: self._broker_answers(i), timeout, f"broker-{i}", give_up=start_checks[i]):
                self._restart_after_failed_start(i, start_checks[i]())
                self.start_broker(i, timeout, attempts=self.START_RETRIES - 1)
        if self.spec.modern:
            if self.spec.secured:
                self.create_users()
            self._ensure_offsets_topic_admin()
            if self.spec.secured:
                self.create_acls()
        else:
            self._ensure_offsets_topic()

    def stop_broker(self, broker_id: int, timeout: float = 60) -> str:
        name = f"broker-{broker_id}"
        res = procs.stop(self._pid_file(name), self.marker, timeout=timeout)
        procs.wait_port_free(self.spec.host(broker_id), self.spec.broker_port(broker_id), 15)
        return res

    #: a broker's port can be held for a moment by a client connection that the kernel gave it as
    #: its local (ephemeral) port; the broker then fails on a BindException (and a 0.9 broker may
    #: hang in its shutdown after that instead of exiting). The port plan keeps every lab port out
    #: of the ephemeral range (fleetlab.ports); this covers a port chosen inside it, and any other
    #: fatal start-up error that a second start clears (a registration of the killed process's
    #: ZooKeeper session not yet expired, a data-dir lock not yet released).
    START_RETRIES = 4
    _FATAL_START = (b"Fatal error during KafkaServer startup", b"Fatal error during broker startup",
                    b"Exiting Kafka due to fatal exception")

    def _start_failure_check(self, broker_id: int):
        """A predicate: has the broker logged a fatal start-up error since now (its server.log grew
        one)? Returns the reason line (the bind failure, or the first line after the FATAL) or ''."""
        server_log = self.spec.broker_dir(broker_id) / "logs" / "server.log"
        at_start = server_log.stat() if server_log.exists() else None

        def start_failed() -> str:
            grown = log_grown_since(server_log, at_start)
            if b"Address already in use" in grown:
                return "its port was taken by another socket for a moment (BindException)"
            for marker in self._FATAL_START:
                at = grown.find(marker)
                if at >= 0:
                    cause = grown[at:].splitlines()[1:2] or [marker]
                    return "it failed to start: " + cause[0].decode(errors="replace").strip()[:300]
            return ""
        return start_failed

    def _restart_after_failed_start(self, broker_id: int, reason: str) -> None:
        log.warning("%s broker %d on %s:%d: %s; stopping the failed broker process by PID and "
                    "starting it again", self.spec.name, broker_id, self.spec.host(broker_id),
                    self.spec.broker_port(broker_id), reason)
        procs.stop(self._pid_file(f"broker-{broker_id}"), self.marker, timeout=15)
        # a killed 0.9 broker's ZooKeeper session (and what it registered) outlives it by the
        # session timeout; the next start must not meet it
        time.sleep(3 if self.spec.kraft else 7)

    def _warn_ephemeral_ports(self) -> None:
        low, high = ports.ephemeral_range()
        mine = [self.spec.zk_port] if not self.spec.kraft else []
        mine += [self.spec.broker_port(i) for i in range(self.spec.brokers)]
        if self.spec.secured:
            mine += [self.spec.internal_port(i) for i in range(self.spec.brokers)]
        if self.spec.kraft:
            mine += [self.spec.controller_port(i) for i in range(self.spec.brokers)]
        inside = [p for p in mine if low <= p <= high]
        if inside:
            log.warning("%s: ports %s are in this machine's ephemeral range %d-%d: the kernel may give "
                        "one to a client socket, and a broker (re)started then cannot bind it; "
                        "choose a port base below %d", self.spec.name, inside, low, high, low)

    def start_broker(self, broker_id: int, timeout: float = 120, attempts: int = START_RETRIES) -> None:
        home = ensure_kafka_dist(self.spec.kafka_version)
        what = f"broker {broker_id} on {self.spec.host(broker_id)}:{self.spec.broker_port(broker_id)}"
        reason = ""
        for attempt in range(attempts):
            failed = self._start_failure_check(broker_id)
            self._start_broker_process(home, broker_id)
            if not self._wait(what, lambda: self._broker_answers(broker_id), timeout, f"broker-{broker_id}",
                              give_up=failed):
                return
            reason = failed()
            if attempt == attempts - 1:
                raise LabError(f"{what}: {reason} at each of {attempts} starts; "
                               f"see {self.spec.broker_dir(broker_id) / 'logs' / 'server.log'}")
            self._restart_after_failed_start(broker_id, reason)

    def down(self, timeout: float = 60) -> list[str]:
        """Stop every broker at once (a KRaft node stopped after its peers waits for a quorum that
        is gone; one by one, 0.9 moves every leader twice), then ZooKeeper."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=self.spec.brokers) as pool:
            results = list(pool.map(lambda i: self.stop_broker(i, timeout), range(self.spec.brokers)))
        out = [f"broker {i}: {r}" for i, r in enumerate(results)]
        if self.spec.broker_ssh:
            out += [f"sshd {i}: {self.spec.sshd(i).stop()}" for i in range(self.spec.brokers)]
        if not self.spec.kraft:
            out.append(f"zookeeper: {procs.stop(self._pid_file('zookeeper'), self.marker, timeout=timeout)}")
            procs.wait_port_free("127.0.0.1", self.spec.zk_port, 15)
        return out

    def status(self) -> list[dict]:
        rows = []
        if not self.spec.kraft:
            pid = procs.owned_pid(self._pid_file("zookeeper"), self.marker)
            rows.append({"component": "zookeeper", "address": f"{self.spec.zk_hosts}{self.spec.chroot}",
                         "pid": pid, "running": pid is not None,
                         "answering": self._zk_ok() if pid else False, **self._memory(pid)})
        for i in range(self.spec.brokers):
            pid = procs.owned_pid(self._pid_file(f"broker-{i}"), self.marker)
            address = f"{self.spec.host(i)}:{self.spec.broker_port(i)}"
            if self.spec.kraft:
                address += f" (controller {self.spec.host(i)}:{self.spec.controller_port(i)})"
            rows.append({"component": f"broker-{i}", "address": address,
                         "pid": pid, "running": pid is not None,
                         "answering": self._broker_answers(i) if pid else False,
                         "log_dir": str(self.spec.log_dir(i)), **self._memory(pid)})
        return rows

    @staticmethod
    def _memory(pid: int | None) -> dict:
        mem = procs.memory_mb(pid) if pid else None
        return {"rss_mb": round(mem[0], 1), "peak_rss_mb": round(mem[1], 1)} if mem else {"rss_mb": None, "peak_rss_mb": None}

    # -- demo traffic ----------------------------------------------------------------------
    def start_traffic(self, rate: float = 20.0) -> int:
        """Start fleetlab.traffic against this lab in the background (PID file in the lab)."""
        import sys

        pid = procs.owned_pid(self._pid_file("traffic"), self.marker)
        if pid:
            return pid
        argv = [sys.executable, "-m", "fleetlab.traffic", "--bootstrap", self.spec.bootstrap,
                "--kafka-version", self.spec.kafka_version, "--rate", str(rate), "--lab-marker", self.marker]
        if self.spec.secured:  # it logs in as admin, the password read from the lab's secrets.json
            argv += ["--lab-dir", str(self.spec.path)]
        return procs.start(argv, self._pid_file("traffic"), self._log_file("traffic"))

    def stop_traffic(self) -> str:
        return procs.stop(self._pid_file("traffic"), self.marker, timeout=30)

    def running(self) -> bool:
        return all(r["running"] for r in self.status())

    def wipe(self) -> None:
        """Remove the lab folder's data (only when nothing runs)."""
        if any(r["running"] for r in self.status()):
            raise LabError(f"lab {self.spec.path} is running; run `fleetlab down` first")
        shutil.rmtree(self.spec.path, ignore_errors=True)


LOG4J = """\
log4j.rootLogger=INFO, kafkaAppender
log4j.appender.kafkaAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.kafkaAppender.DatePattern='.'yyyy-MM-dd-HH
log4j.appender.kafkaAppender.File=${kafka.logs.dir}/server.log
log4j.appender.kafkaAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.kafkaAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.cleanerAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.cleanerAppender.DatePattern='.'yyyy-MM-dd-HH
log4j.appender.cleanerAppender.File=${kafka.logs.dir}/log-cleaner.log
log4j.appender.cleanerAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.cleanerAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stateAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.stateAppender.DatePattern='.'yyyy-MM-dd-HH
log4j.appender.stateAppender.File=${kafka.logs.dir}/state-change.log
log4j.appender.stateAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.stateAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.log.LogCleaner=INFO, cleanerAppender
log4j.additivity.kafka.log.LogCleaner=false
log4j.logger.state.change.logger=TRACE, stateAppender
log4j.additivity.state.change.logger=false
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.org.I0Itec.zkclient=WARN
log4j.logger.kafka.request.logger=WARN
"""

LOG4J2 = """\
status = warn
appender.server.type = File
appender.server.name = server
appender.server.fileName = ${sys:kafka.logs.dir}/server.log
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
appender.cleaner.type = File
appender.cleaner.name = cleaner
appender.cleaner.fileName = ${sys:kafka.logs.dir}/log-cleaner.log
appender.cleaner.layout.type = PatternLayout
appender.cleaner.layout.pattern = [%d] %p %m (%c)%n
appender.state.type = File
appender.state.name = state
appender.state.fileName = ${sys:kafka.logs.dir}/state-change.log
appender.state.layout.type = PatternLayout
appender.state.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.server.ref = server
logger.cleaner.name = org.apache.kafka.storage.internals.log.LogCleaner
logger.cleaner.level = INFO
logger.cleaner.additivity = false
logger.cleaner.appenderRef.cleaner.ref = cleaner
logger.state.name = state.change.logger
logger.state.level = INFO
logger.state.additivity = false
logger.state.appenderRef.state.ref = state
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""
