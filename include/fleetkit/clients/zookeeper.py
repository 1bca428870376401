"""Reads the ZooKeeper side of a ZooKeeper-mode Kafka cluster (0.9 to 3.x) with kazoo.

Layout (Kafka's ZkData), below an optional chroot:
  /brokers/ids/<id>                               broker registration
  /brokers/topics/<topic>/partitions/<p>/state    leader, leader_epoch, controller_epoch, isr
  /controller                                     current controller

Authentication comes from the Airflow connection (``connection_settings``: digest or SASL
DIGEST-MD5); every znode the toolkit creates goes through ``create_znode`` / ``new_znode_acl``
(the ACL rule is written there), and a write ZooKeeper refuses becomes one line
(``not_authorized``: a ZooKeeperNotAuthorized, which is a NotAuthorized). Passwords never reach a repr, a log line or an error.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import (AuthFailedError, ConnectionLoss, KazooException, NoAuthError, NoNodeError,
                              SessionClosedRequireSaslError)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import CREATOR_ALL_ACL, READ_ACL_UNSAFE

from fleetkit.core.errors import AuthenticationFailed, ClusterUnreachable, TlsHandshakeFailed, ZooKeeperNotAuthorized

log = logging.getLogger(__name__)

AUTH_SCHEMES = ("digest", "sasl")
ANONYMOUS = "anonymous (no ZooKeeper authentication)"


@dataclass(frozen=True)
class ZooKeeperAuth:
    """Who the toolkit is to ZooKeeper: `scheme` digest (addauth digest user:password) or sasl
    (SASL DIGEST-MD5, a server with a JAAS login). The password never shows in repr or str."""

    scheme: str
    username: str
    password: str = field(default="", repr=False)

    def __post_init__(self):
        if self.scheme not in AUTH_SCHEMES:
            raise ValueError(f"ZooKeeper auth scheme must be one of {', '.join(AUTH_SCHEMES)}, got {self.scheme!r}")

    @property
    def identity(self) -> str:
        """The ZooKeeper id of the session (as an ACL names it, without the password): digest:<user>, sasl:<user>."""
        return f"{self.scheme}:{self.username}"

    def __repr__(self) -> str:
        return f"ZooKeeperAuth({self.identity}, password=***)"

    __str__ = __repr__

    def kazoo_args(self) -> dict:
        """KazooClient keyword arguments: auth_data for digest, sasl_options for SASL."""
        if self.scheme == "sasl":
            return {"sasl_options": {"mechanism": "DIGEST-MD5", "username": self.username,
                                     "password": self.password}}
        return {"auth_data": [("digest", f"{self.username}:{self.password}")]}


class _RedactAuth(logging.Filter):
    """kazoo logs every request it sends at DEBUG, an addauth's credential included
    ("Sending request(xid=-4): Auth(auth_type=0, scheme='digest', auth='user:password')"): the
    credential is replaced before any handler sees the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(type(a).__name__ == "Auth" and hasattr(a, "_replace") for a in args):
            record.args = tuple(a._replace(auth="***") if type(a).__name__ == "Auth" and hasattr(a, "_replace")
                                else a for a in args)
        return True


#: the logger the toolkit's kazoo clients log through (kazoo's messages, credentials redacted)
kazoo_log = logging.getLogger("fleetkit.kazoo")
kazoo_log.addFilter(_RedactAuth())


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    controller_epoch: int
    isr: tuple[int, ...]
    version: int  # znode version, for conditional writes


def join_chroot(hosts: str, chroot: str) -> str:
    """kazoo takes the chroot as a suffix of the host list: 'h1:2181,h2:2181/kafka'."""
    return f"{hosts}{chroot}" if chroot else hosts


def parse_state(topic: str, partition: int, data: bytes, version: int) -> PartitionState:
    try:
        doc = json.loads(data.decode("utf-8"))
        return PartitionState(
            topic=topic, partition=partition,
            leader=int(doc["leader"]), leader_epoch=int(doc["leader_epoch"]),
            controller_epoch=int(doc["controller_epoch"]),
            isr=tuple(int(b) for b in doc.get("isr", [])), version=version,
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"partition state of {topic}-{partition} is not valid JSON state: {e}") from None


class _LoopErrors(logging.Handler):
    """Collects what kazoo's connection loop logs instead of raising: TLS errors (it retries them),
    one line each, and a refused SASL login (its loop ends on it before the client says connected),
    for start() to name."""

    def __init__(self, ssl_errors: list[str], sasl_refused: list[bool], sasl: bool):
        super().__init__(logging.WARNING)
        self.ssl_errors, self.sasl_refused = ssl_errors, sasl_refused
        # a refusal of the SASL exchange, or (only when this client logs in with SASL) a failed auth
        self.refusals = (SessionClosedRequireSaslError, AuthFailedError) if sasl else (SessionClosedRequireSaslError,)

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and isinstance(record.exc_info[1], self.refusals):
            self.sasl_refused.append(True)
            return
        msg = record.getMessage()
        if "SSL" in msg or "certificate" in msg.lower():
            text = msg.split("socket connection error: ", 1)[-1]
            self.ssl_errors.append(" ".join(text.split()))


class ZooKeeperCluster:
    """A kazoo client for one cluster's ZooKeeper, chroot applied."""

    def __init__(self, name: str, hosts: str, chroot: str = "", auth: ZooKeeperAuth | None = None,
                 timeout: float = 10.0, client: KazooClient | None = None, persistent: bool = False,
                 tls: "ZooKeeperTls | None" = None):
        """auth: who to be (digest or SASL; None: anonymous). persistent: keep reconnecting forever
        (a long-lived watcher) instead of giving up after three connection attempts (a collection,
        which must fail fast and say so). tls: connect over TLS (ZooKeeper's secureClientPort),
        the server's certificate checked against `tls.ca` and its host name."""
        self.name = name
        self.hosts = hosts
        self.chroot = chroot
        self.timeout = timeout
        self.auth = auth
        self.tls = tls
        self._own_client = client is None
        retry = ({"max_tries": -1, "delay": 0.2, "max_delay": 5} if persistent
                 else {"max_tries": 3, "delay": 0.2})
        self.client = client or KazooClient(hosts=join_chroot(hosts, chroot), timeout=timeout,
                                            connection_retry=retry, command_retry={"max_tries": 3, "delay": 0.2},
                                            logger=kazoo_log, **(auth.kazoo_args() if auth else {}),
                                            **(tls.kazoo_args() if tls else {}))

    @classmethod
    def from_settings(cls, name: str, settings: "ConnectionSettings", **kwargs) -> "ZooKeeperCluster":
        """A not yet started client from ``connection_settings``' result."""
        return cls(name, settings.hosts, settings.chroot, auth=settings.auth, timeout=settings.timeout,
                   tls=settings.tls, **kwargs)

    @property
    def identity(self) -> str:
        """Who this client is to ZooKeeper (digest:<user>, sasl:<user> or anonymous), never a password."""
        return zk_identity(self.client) if self.auth is None else self.auth.identity

    def __repr__(self) -> str:
        return f"ZooKeeperCluster({self.name!r}, {self.hosts}{self.chroot}, {self.identity})"

    __str__ = __repr__

    def persistent(self) -> "ZooKeeperCluster":
        """A new, not yet started client to the same ZooKeeper that never stops reconnecting."""
        return ZooKeeperCluster(self.name, self.hosts, self.chroot, self.auth, self.timeout, persistent=True)

    def __enter__(self) -> "ZooKeeperCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Connect, or raise ClusterUnreachable naming the cluster: after `timeout` seconds, or as soon
        as kazoo's connection retries give up (a refused connection fails in about a second; kazoo's
        own start() would still wait out the whole timeout)."""
        if self.client.connected:
            return
        ssl_errors: list[str] = []
        sasl_refused: list[bool] = []
        watcher = _LoopErrors(ssl_errors, sasl_refused, self.auth is not None and self.auth.scheme == "sasl")
        kazoo_log.addHandler(watcher)
        try:
            event = self.client.start_async()
            routine = getattr(getattr(self.client, "_connection", None), "_connection_routine", None)
            deadline = time.monotonic() + self.timeout
            while not event.wait(0.1):
                if sasl_refused:
                    break  # the loop ended on the login: said below, not "did not answer"
                if time.monotonic() >= deadline:
                    raise KazooTimeoutError("Connection time-out")
                if routine is not None and hasattr(routine, "is_alive") and not routine.is_alive():
                    raise KazooTimeoutError("no server answered within the connection retry policy "
                                            "(connection refused?)")
            if sasl_refused:
                self.stop()
                raise self._login_refused()
            if not self.client.connected:
                raise KazooTimeoutError("Connection time-out")
        except (KazooTimeoutError, KazooException) as e:
            self.stop()
            if sasl_refused:
                raise self._login_refused() from None
            if ssl_errors:  # the server answered, the TLS handshake failed: say so, not "did not answer"
                raise TlsHandshakeFailed(f"TLS handshake with the ZooKeeper of cluster {self.name!r} ({self.hosts}) "
                                         f"failed: {ssl_errors[-1]}") from None
            raise ClusterUnreachable(
                f"ZooKeeper of cluster {self.name!r} ({self.hosts}{self.chroot}) did not answer: {e}") from None
        finally:
            kazoo_log.removeHandler(watcher)
        self._check_login()

    def _login_refused(self) -> AuthenticationFailed:
        where = f"ZooKeeper of cluster {self.name!r} ({self.hosts}{self.chroot})"
        if self.auth is not None and self.auth.scheme == "sasl":
            return AuthenticationFailed(f"authentication failed for {self.identity} on {where}: the SASL "
                                        "(DIGEST-MD5) login was refused (wrong password or unknown user)")
        return AuthenticationFailed(f"authentication failed for {self.identity} on {where}: the server requires "
                                    "a SASL login (set the connection's login, password and extra "
                                    "{\"auth\": \"sasl\"})")

    def _check_login(self) -> None:
        """kazoo reports CONNECTED before its SASL exchange ends, and a refused SASL login (or a
        session without one on a server that requires it) only shows as the first request failing
        with a bare ConnectionLoss: one request here turns that into AuthenticationFailed, one line
        naming the identity and the cluster, never the password."""
        try:
            self.client.exists("/")
        except SessionClosedRequireSaslError:
            self.stop()
            raise self._login_refused() from None
        except (AuthFailedError, ConnectionLoss) as e:
            self.stop()
            if self.auth is not None and self.auth.scheme == "sasl":
                raise self._login_refused() from None
            raise ClusterUnreachable(f"ZooKeeper of cluster {self.name!r} ({self.hosts}{self.chroot}) closed the "
                                     f"session: {type(e).__name__}") from None

    def stop(self) -> None:
        if self._own_client:
            try:
                self.client.stop()
                self.client.close()
            except Exception:  # noqa: BLE001 - closing a dead session must not hide the real error
                pass

    def broker_ids(self) -> list[int]:
        try:
            return sorted(int(c) for c in self.client.get_children("/brokers/ids"))
        except NoNodeError:
            return []

    def controller_id(self) -> int | None:
        try:
            data, _ = self.client.get("/controller")
            return int(json.loads(data)["brokerid"])
        except NoNodeError:
            return None

    def topic_partitions(self, topic: str) -> list[int]:
        try:
            return sorted(int(p) for p in self.client.get_children(f"/brokers/topics/{topic}/partitions"))
        except NoNodeError:
            return []

    def partition_states(self, topics: Iterable[str]) -> tuple[list[PartitionState], list[str]]:
        """State znodes of every partition of `topics`, read concurrently.

        Returns (states, problems); a topic or partition without a state znode is a problem, not
        an exception (a topic being created or deleted, say).
        """
        problems: list[str] = []
        wanted: list[tuple[str, int]] = []
        topics = sorted(set(topics))
        child_futs = {t: self.client.get_children_async(f"/brokers/topics/{t}/partitions") for t in topics}
        for t, fut in child_futs.items():
            try:
                wanted.extend((t, int(p)) for p in fut.get(timeout=self.timeout))
            except NoNodeError:
                problems.append(f"topic {t!r} has no partitions in ZooKeeper")
        futs = {(t, p): self.client.get_async(f"/brokers/topics/{t}/partitions/{p}/state") for t, p in wanted}
        states: list[PartitionState] = []
        for (t, p), fut in futs.items():
            try:
                data, stat = fut.get(timeout=self.timeout)
            except NoNodeError:
                problems.append(f"partition {t}-{p} has no state znode (no leader elected yet)")
                continue
            try:
                states.append(parse_state(t, p, data, stat.version))
            except ValueError as e:
                problems.append(str(e))
        return states, problems


@dataclass(frozen=True)
class ZooKeeperTls:
    """TLS to ZooKeeper (its secureClientPort): the CA that signs the servers' certificates, and a
    client certificate and key when the servers ask for one (ssl.clientAuth). The server's name is
    checked against its certificate unless `check_hostname` is off; certificates are always verified."""

    ca: str
    certfile: str | None = None
    keyfile: str | None = None
    check_hostname: bool = True

    def kazoo_args(self) -> dict:
        return {"use_ssl": True, "ca": self.ca, "certfile": self.certfile, "keyfile": self.keyfile,
                "verify_certs": True, "check_hostname": self.check_hostname}


@dataclass(frozen=True)
class ConnectionSettings:
    """A ZooKeeper connection's settings (``connection_settings``). The password lives only inside
    `auth` and never shows in repr; item access (``s["hosts"]``) reads the fields."""

    hosts: str
    chroot: str = ""
    auth: ZooKeeperAuth | None = None
    timeout: float = 10.0
    tls: ZooKeeperTls | None = None

    def __getitem__(self, key: str) -> Any:
        if key in ("hosts", "chroot", "auth", "timeout", "tls"):
            return getattr(self, key)
        raise KeyError(key)

    @property
    def auth_data(self) -> list | None:
        """kazoo's auth_data (digest), or None."""
        return self.auth.kazoo_args().get("auth_data") if self.auth else None

    @property
    def sasl_options(self) -> dict | None:
        """kazoo's sasl_options (SASL DIGEST-MD5), or None."""
        return self.auth.kazoo_args().get("sasl_options") if self.auth else None


def connection_settings(conn_id: str, host: str | None, port: int | None, login: str | None,
                        password: str | None, extra: dict | None, chroot: str | None = None) -> ConnectionSettings:
    """A ZooKeeper connection's fields -> the ZooKeeperCluster arguments: host and port, or extra
    {"hosts": "zk1:2181,zk2:2181"}; extra "chroot" is the default chroot (`chroot`, the fleet
    file's, wins when given); extra "timeout" in seconds.

    TLS, from extra "ssl" (ZooKeeper's secureClientPort, which the hosts must name):
      {"ca": "/path/ca.pem", "certfile": ..., "keyfile": ... (a client certificate, where the server
      asks for one), "check_hostname": true}; the server's certificate is always verified. Without
      it the session, a digest login's password included, travels in clear (docs/security.md).

    Authentication, from login/password and extra "auth":
      * "digest" (the default when a login is given): kazoo auth_data [("digest", "login:password")]
        (ZooKeeper's addauth digest: no server configuration needed);
      * "sasl": kazoo sasl_options {"mechanism": "DIGEST-MD5", "username": login, "password":
        password} (the server needs a SASL login: a JAAS Server section and its authProvider);
      * no login: anonymous (extra "auth" must then be absent).
    Errors name the connection and the field, never the password."""
    extra = extra or {}
    hosts = extra.get("hosts")
    if not hosts:
        if not host:
            raise ValueError(f"ZooKeeper connection {conn_id!r} has neither host nor extra.hosts")
        hosts = f"{host}:{port or 2181}"
    chroot = chroot if chroot is not None else extra.get("chroot", "")
    scheme = extra.get("auth")
    if scheme is not None and (not isinstance(scheme, str) or scheme.lower() not in AUTH_SCHEMES):
        raise ValueError(f"ZooKeeper connection {conn_id!r}: extra.auth must be one of {', '.join(AUTH_SCHEMES)}, "
                         f"got {scheme!r}")
    auth = None
    if login:
        auth = ZooKeeperAuth((scheme or "digest").lower(), login, password or "")
    elif scheme is not None:
        raise ValueError(f"ZooKeeper connection {conn_id!r}: extra.auth is {scheme!r} but the connection has no "
                         "login (the user to authenticate as)")
    return ConnectionSettings(hosts=hosts, chroot=chroot or "", auth=auth, timeout=float(extra.get("timeout", 10)),
                              tls=_tls_of(conn_id, extra.get("ssl")))


def _tls_of(conn_id: str, value) -> ZooKeeperTls | None:
    """extra.ssl of a ZooKeeper connection -> ZooKeeperTls (None: no TLS); errors name the field."""
    if value in (None, False, {}):
        return None
    if not isinstance(value, dict):
        raise ValueError(f"ZooKeeper connection {conn_id!r}: extra.ssl must be an object like "
                         '{"ca": "/path/ca.pem"}, got ' f"{type(value).__name__}")
    unknown = sorted(set(value) - {"ca", "certfile", "keyfile", "check_hostname"})
    if unknown:
        raise ValueError(f"ZooKeeper connection {conn_id!r}: extra.ssl has unknown key(s) {', '.join(unknown)} "
                         "(known: ca, certfile, keyfile, check_hostname)")
    if not value.get("ca"):
        raise ValueError(f"ZooKeeper connection {conn_id!r}: extra.ssl.ca (the CA file of the servers' certificates) "
                         "is required: a server's certificate is always verified")
    if bool(value.get("certfile")) != bool(value.get("keyfile")):
        raise ValueError(f"ZooKeeper connection {conn_id!r}: extra.ssl needs both certfile and keyfile, or neither")
    return ZooKeeperTls(ca=str(value["ca"]), certfile=value.get("certfile"), keyfile=value.get("keyfile"),
                        check_hostname=bool(value.get("check_hostname", True)))


# -- who we are, and the ACL of what we create ---------------------------------------------------------
def _sasl_options(client) -> dict | None:
    return getattr(getattr(client, "_connection", None), "sasl_options", None)


def authenticated(client) -> bool:
    """Whether a kazoo client's session authenticates (digest auth_data or SASL options)."""
    return bool(getattr(client, "auth_data", None)) or bool(_sasl_options(client))


def zk_identity(client) -> str:
    """The ZooKeeper identity a kazoo client acts as, as an ACL names it: digest:<user>,
    sasl:<user> (several joined with ', '), or anonymous. Never a password."""
    ids = []
    sasl = _sasl_options(client)
    if sasl:
        ids.append(f"sasl:{sasl.get('username', '?')}")
    for scheme, credential in sorted(getattr(client, "auth_data", None) or ()):
        ids.append(f"{scheme}:{str(credential).split(':', 1)[0]}" if scheme == "digest" else f"{scheme}:?")
    return ", ".join(ids) or ANONYMOUS


def not_authorized(client, operation: str, path: str, cluster: str | None = None) -> ZooKeeperNotAuthorized:
    """ZooKeeper refused `operation` on `path` (NoAuth): the one-line error (a NotAuthorized)
    naming the operation, the znode (and the client's chroot) and the identity used, never a
    password: "ZooKeeper refused create on znode /admin/reassign_partitions (chroot /kafka) for
    digest:fleet-runbook on cluster 'prod' (NoAuth: the znode's ACL does not grant it)"."""
    chroot = getattr(client, "chroot", "") or ""
    where = f"znode {path}" + (f" (chroot {chroot})" if chroot else "")
    return ZooKeeperNotAuthorized(operation, where, zk_identity(client), cluster=cluster)


def _nearest_acl(client, path: str, cluster: str | None) -> list:
    """The ACL of the nearest existing ancestor of `path` (`path` excluded), up to /."""
    node = path.rstrip("/").rpartition("/")[0]
    while True:
        try:
            acl, _ = client.get_acls(node or "/")
            return acl
        except NoNodeError:
            if not node:
                raise
            node = node.rpartition("/")[0]
        except NoAuthError:
            raise not_authorized(client, "read ACL", node or "/", cluster) from None


def new_znode_acl(client, path: str, cluster: str | None = None) -> list:
    """THE ACL of every znode the toolkit creates (and of any missing parent it creates on the way).

    * The session authenticates (digest or SASL): Kafka's ``zookeeper.set.acl=true`` policy, i.e.
      the creator (the authenticated identity: kazoo's CREATOR_ALL_ACL, ZooKeeper's ``auth``
      scheme, which works with digest and SASL) has all rights and the world may READ (Kafka's
      brokers and tools read these znodes; the controller deletes /admin znodes through its right
      on the parent).
    * The session is anonymous: the ACL of the nearest existing parent, i.e. what the cluster has
      (an open parent gives an open znode, a protected parent a protected one; then ZooKeeper
      refuses the create, and NotAuthorized says so).
    Never kazoo's default OPEN_ACL_UNSAFE: every create passes this ACL explicitly, makepath
    included (kazoo's ensure_path creates each missing parent with the same ACL)."""
    if authenticated(client):
        return list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)
    return list(_nearest_acl(client, path, cluster))


def create_znode(client, path: str, value: bytes = b"", *, makepath: bool = False, ephemeral: bool = False,
                 acl: list | None = None, cluster: str | None = None, operation: str = "create") -> str:
    """Create `path` (and, with makepath, its missing parents) with ``new_znode_acl`` (or `acl`,
    one it computed earlier for the same place). NodeExistsError passes through; a create ZooKeeper
    refuses raises NotAuthorized (one line: operation, znode, identity)."""
    acl = acl if acl is not None else new_znode_acl(client, path, cluster)
    try:
        return client.create(path, value, acl=acl, makepath=makepath, **({"ephemeral": True} if ephemeral else {}))
    except NoAuthError:
        raise not_authorized(client, operation, path, cluster) from None
