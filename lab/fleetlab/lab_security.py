"""What a secured lab cluster grants, and the Lab's steps that set it up: the users, their
passwords and certificates, the ACLs, ZooKeeper's JAAS logins (a part of fleetlab.lab.Lab).

Every cluster of the lab fleet is secured as production clusters are (fleetlab.lab_spec.fleet_specs):
SASL_SSL with SCRAM and ACLs on 3.x / 4.x, mutual TLS and ACLs on 0.9, a SASL login to the ZooKeeper
of the ZooKeeper-mode 3.x cluster. The notes above each table say how.
"""

from __future__ import annotations

import json
import logging
import subprocess

from contextlib import contextmanager
from pathlib import Path

from fleetlab import oauth, procs
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.errors import LabError

log = logging.getLogger(__name__)


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


def _resource_types() -> dict:
    """SECURED_ACLS' resource types as confluent-kafka's (librdkafka calls Kafka's CLUSTER resource
    type (4) BROKER)."""
    from confluent_kafka.admin import ResourceType

    return {"cluster": ResourceType.BROKER, "group": ResourceType.GROUP, "topic": ResourceType.TOPIC}


class LabSecurity:
    """The Lab's security steps (mixed into fleetlab.lab.Lab: `self.spec` is its LabSpec)."""

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

        from fleetkit.clients.protocol import transport
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
                    transport.broker_versions(f"{self.spec.host(i)}:{self.spec.broker_port(i)}", 5, security=security)
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
        from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType

        types = _resource_types()
        bindings = [AclBinding(types[rtype], name, ResourcePatternType.LITERAL, f"User:{user}",
                               "*", getattr(AclOperation, op), AclPermissionType.ALLOW)
                    for user, acls in SECURED_ACLS.items() for rtype, name, op in acls]
        admin = self.admin()
        for binding, fut in admin.create_acls(bindings, request_timeout=30).items():
            try:
                fut.result(timeout=60)
            except Exception as e:  # noqa: BLE001 - named in the LabError
                raise LabError(f"{self.spec.name}: creating ACL {binding} failed: {e}") from None

    @contextmanager
    def acl_revoked(self, user: str, acl: tuple[str, str, str]):
        """Secured labs (3.x / 4.x): `user`'s ACL `acl` (a SECURED_ACLS row: resource type, literal
        name, operation) deleted by `admin` for the block (DeleteAcls), created again after it
        whatever happens (creating an existing ACL is a no-op). The brokers learn either change
        asynchronously (AclAuthorizer: a ZooKeeper change notification; StandardAuthorizer: the
        metadata log): the caller waits for the effect it needs."""
        from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType

        if acl not in SECURED_ACLS.get(user, []):
            raise LabError(f"{self.spec.name}: {user} has no lab ACL {acl}")
        rtype, name, op = acl
        admin = self.admin()
        wanted = AclBindingFilter(_resource_types()[rtype], name, ResourcePatternType.LITERAL, f"User:{user}", "*",
                                  getattr(AclOperation, op), AclPermissionType.ALLOW)
        for fut in admin.delete_acls([wanted], request_timeout=30).values():
            if not fut.result(timeout=60):
                raise LabError(f"{self.spec.name}: {user}'s ACL {acl} was not there to delete")
        try:
            yield
        finally:
            self.create_acls()

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
            argv = [self._java(), "-Xmx128m", *procs.jvm_flags(), f"-Djava.security.auth.login.config={self.broker_jaas_file}",
                    *self._logging_flags(self.spec.path / "zookeeper" / "logs"), "-cp", f"{home}/libs/*",
                    "kafka.admin.ZkSecurityMigrator", "--zookeeper.acl", "secure",
                    "--zookeeper.connect", f"{self.spec.zk_hosts}{self.spec.chroot}"]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise LabError(f"{self.spec.name}: securing the existing znodes (kafka.admin.ZkSecurityMigrator) "
                               f"failed:\n{(out.stdout + out.stderr).strip()[-2000:]}")
            log.info("%s: existing znodes below %s given the brokers' ACL", self.spec.name, self.spec.chroot)
        marker.write_text("secure\n")
