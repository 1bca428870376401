"""A thin, typed facade over confluent-kafka for reading a cluster's consumer-group state.

It knows the protocol quirks of old brokers (0.9 cannot answer ApiVersions, so the client must
be told the broker version) and turns librdkafka's futures into plain data. It never changes a
cluster except through the explicit commit helper used by runbooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import logging
import re
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Iterable

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from fleetkit.core.errors import (PRE_0_10, AuthenticationFailed, ClusterUnreachable, NotAuthorized, TlsHandshakeFailed,
                                  refused)
from fleetkit.core.fleet import version_tuple
from fleetkit.core.render import visible_controls

if TYPE_CHECKING:
    from fleetkit.clients import wire as kafka_wire

log = logging.getLogger(__name__)

#: Log lines librdkafka prints against 0.9 brokers that mean nothing (seen on the lab's 0.9.0.1 brokers).
_HARMLESS = ("Protocol parse failure for Metadata v0", "is deprecated: **Post-deprecation actions",
             "tmpabuf memory shortage")

# confluent-kafka's ConsumerGroupState names -> Kafka's own names (the datasets store these; 0.9's AwaitingSync is CompletingRebalance)
_STATE_NAMES = {
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "PREPARING_REBALANCE": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "COMPLETING_REBALANCE": "CompletingRebalance",
    "AWAITINGSYNC": "CompletingRebalance",
    # the brokers' own spellings (the wire protocol's DescribeGroups)
    "PREPARINGREBALANCE": "PreparingRebalance",
    "COMPLETINGREBALANCE": "CompletingRebalance",
    # KIP-848 consumer groups (Kafka 4)
    "ASSIGNING": "Assigning",
    "RECONCILING": "Reconciling",
    "UNKNOWN": "Unknown",
}

NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group has no commit for the partition


#: librdkafka's log line of a refused login: the KafkaCluster's error_cb turns it into AuthenticationFailed
_SASL_REFUSED = "SASL authentication error"
#: ... and of a failed TLS handshake (KafkaError._SSL): turned into TlsHandshakeFailed
_TLS_FAILED = "SSL handshake failed"


class _LibrdkafkaLog(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(h in msg for h in _HARMLESS) and _SASL_REFUSED not in msg and _TLS_FAILED not in msg


def login_reason(text: str) -> str:
    """The broker's reason in librdkafka's text of an _AUTHENTICATION error, without the broker
    address and librdkafka's timing: 'sasl_ssl://h:9/bootstrap: SASL authentication error: X (after
    316ms in state AUTH_REQ)' -> 'X'."""
    import re

    out = re.sub(r"^\S+://\S+: ", "", str(text).strip())
    out = re.sub(r"^SASL authentication error: ", "", out)
    out = re.sub(r"\s*\(after \d+ms in state \w+\)$", "", out)
    return out or str(text)


def tls_failure(text: str) -> tuple[str, str]:
    """(broker address, reason) of librdkafka's text of an _SSL error: 'ssl://h:9/bootstrap: SSL
    handshake failed: X (after 6ms in state SSL_HANDSHAKE)' -> ('h:9', 'X')."""
    import re

    text = str(text).strip()
    m = re.match(r"^\w+://([^/\s]+)(?:/\S*)?: ", text)
    broker = m.group(1) if m else "?"
    out = text[m.end():] if m else text
    out = re.sub(r"^SSL handshake failed: ", "", out)
    out = re.sub(r"\s*\(after \d+ms in state \w+\)$", "", out)
    return broker, out or text


class LoginTrap:
    """The error_cb of every librdkafka client a KafkaCluster builds (admin client, consumers): it
    keeps the first SASL authentication error (KafkaError._AUTHENTICATION) and the first failed TLS
    handshake (KafkaError._SSL: an untrusted broker certificate, a client certificate the broker
    wants and did not get), which librdkafka only reports there and in its log while the request
    waits on until it times out. The waiting calls check them and raise AuthenticationFailed /
    TlsHandshakeFailed at once. A connection's own error_cb still runs."""

    def __init__(self, chained=None):
        self.reason: str | None = None
        #: (broker address, reason) of the first failed TLS handshake
        self.tls: tuple[str, str] | None = None
        self.chained = chained

    def __call__(self, err) -> None:
        try:
            if self.reason is None and err.code() == KafkaError._AUTHENTICATION:
                self.reason = login_reason(err.str())
            elif self.tls is None and err.code() == KafkaError._SSL:
                self.tls = tls_failure(err.str())
        finally:
            if self.chained is not None:
                self.chained(err)


_rdlog = logging.getLogger("fleetkit.librdkafka")
_rdlog.addFilter(_LibrdkafkaLog())


#: the first Kafka version whose brokers answer ApiVersions (librdkafka then negotiates by itself)
API_VERSIONS_SINCE = (0, 10)


def parse_version(kafka_version: str) -> tuple[int, ...]:
    """'0.9.0.1' -> (0, 9, 0, 1); ValueError naming the value otherwise."""
    try:
        parts = version_tuple(str(kafka_version).strip())
    except ValueError:
        parts = ()
    if len(parts) < 2:
        raise ValueError(f"kafka_version {kafka_version!r} is not a version like 0.9.0.1, 3.9.2 or 4.3.1")
    return parts


def _is_false(value) -> bool:
    return str(value).strip().lower() in ("false", "0", "no")


def client_config(base: dict, kafka_version: str | None = None) -> dict:
    """Return a librdkafka config for a cluster running `kafka_version`.

    Before 0.10 the brokers cannot answer ApiVersions: the client is told the version
    (api.version.request=false, broker.version.fallback; the connection may override both).
    From 0.10 on librdkafka negotiates every request version itself and neither is added; a
    connection that turns ApiVersions off for such a cluster is refused (librdkafka would then speak
    the oldest request versions, which Kafka 4 no longer accepts)."""
    cfg = dict(base)
    if not cfg.get("bootstrap.servers"):
        raise ValueError("the Kafka connection has no bootstrap.servers in its config")
    if kafka_version:
        parts = parse_version(kafka_version)
        if parts < API_VERSIONS_SINCE:
            cfg.setdefault("api.version.request", False)
            # librdkafka accepts 0.9.0 / 0.8.x here, not four-part versions
            cfg.setdefault("broker.version.fallback", ".".join(str(p) for p in parts[:3]))
        elif "api.version.request" in cfg and _is_false(cfg["api.version.request"]):
            raise ValueError(
                f"the Kafka connection sets api.version.request={cfg['api.version.request']} but the cluster runs "
                f"Kafka {kafka_version}, whose brokers answer ApiVersions (Kafka 4 refuses the old request versions "
                f"that setting forces): remove api.version.request and broker.version.fallback from the "
                f"connection's extra, or correct the fleet file's kafka_version")
    cfg.setdefault("logger", _rdlog)
    return cfg


def state_name(state) -> str:
    """Kafka's name for a confluent-kafka ConsumerGroupState (or a raw string)."""
    raw = getattr(state, "name", None) or str(state)
    return _STATE_NAMES.get(raw.upper().replace("CONSUMERGROUPSTATE.", ""), "Unknown")


#: the error of a coordinator still loading __consumer_offsets (0.9 named it GROUP_LOAD_IN_PROGRESS)
LOAD_IN_PROGRESS = ("COORDINATOR_LOAD_IN_PROGRESS", "GROUP_LOAD_IN_PROGRESS")


def error_name(exc: BaseException) -> str:
    """Kafka's error code name (e.g. NOT_COORDINATOR) for an exception from confluent-kafka."""
    if isinstance(exc, TimeoutError):
        return "TIMED_OUT"
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].name()
    if isinstance(exc, KafkaError):
        return exc.name()
    return type(exc).__name__


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str  # as reported, without 0.9's leading slash
    assignment: tuple[tuple[str, int], ...] | None  # None: the broker did not say
    member_epoch: int | None = None  # KIP-848 members only (ConsumerGroupDescribe)
    reported_host: str = ""  # the host as the broker reports it ('/10.0.0.7', as kafka-consumer-groups prints it)


@dataclass(frozen=True)
class GroupDescription:
    group: str
    state: str
    coordinator_id: int | None
    members: tuple[Member, ...] = ()
    error: str | None = None
    #: "classic" (JoinGroup/SyncGroup, every generation) or "consumer" (KIP-848, Kafka 4); None: not said
    group_type: str | None = None
    #: the assignment strategy (a classic group's protocol, range / roundrobin / ...; a KIP-848
    #: group's server assignor); None: none (no members) or not said
    assignor: str | None = None
    #: the coordinator's host:port, where known
    coordinator: str | None = None
    #: KIP-848 groups: the group epoch ConsumerGroupDescribe answered (None: classic, or not asked)
    group_epoch: int | None = None


def type_name(group_type) -> str | None:
    """'classic' / 'consumer' for a confluent-kafka ConsumerGroupType (None when unknown)."""
    raw = (getattr(group_type, "name", None) or str(group_type or "")).strip().lower()
    return raw if raw in ("classic", "consumer") else None


@dataclass(frozen=True)
class PartitionMeta:
    topic: str
    partition: int
    leader: int  # -1: no leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: str | None = None


@dataclass
class Metadata:
    brokers: dict[int, str]
    controller_id: int | None
    partitions: dict[tuple[str, int], PartitionMeta] = field(default_factory=dict)

    def topic_partitions(self, topic: str) -> list[PartitionMeta]:
        return sorted((p for (t, _), p in self.partitions.items() if t == topic), key=lambda p: p.partition)


def strip_host(host: str | None) -> str:
    """'/10.0.0.7', 'app1.example/10.0.0.7' or '10.0.0.7:5123' -> '10.0.0.7' (0.9 writes Java's
    InetAddress.toString(): '/ip', or 'hostname/ip' once the name was resolved, as on its SSL
    listeners; paths use the bare IP)."""
    if not host:
        return ""
    h = host.rsplit("/", 1)[-1] if "/" in host else host
    if h.startswith("["):  # [ipv6]:port
        return h[1:h.index("]")] if "]" in h else h
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h


def description_from_answer(answer: "kafka_wire.Answer") -> GroupDescription:
    """A GroupDescription from the wire probe's answer: the coordinator the lookup named and what
    that broker described (state by Kafka's name, members with their assignments)."""
    if answer.error:
        return GroupDescription(group=answer.group, state="Unknown", coordinator_id=answer.coordinator_id,
                                error=answer.error, coordinator=answer.coordinator)
    members = tuple(Member(member_id=m.member_id, client_id=m.client_id, host=strip_host(m.client_host),
                           assignment=m.assignment, member_epoch=m.member_epoch, reported_host=m.client_host)
                    for m in answer.described)
    state = state_name(answer.state or "Unknown")
    # DescribeGroups answers for classic groups only (a group it calls Dead may be a KIP-848 one);
    # ConsumerGroupDescribe's answers say "consumer"
    group_type = answer.group_type or ("classic" if state not in ("Dead", "Unknown") else None)
    return GroupDescription(group=answer.group, state=state, coordinator_id=answer.coordinator_id,
                            members=members, group_type=group_type, assignor=answer.assignor,
                            coordinator=answer.coordinator, group_epoch=answer.group_epoch)


def _remaining(deadline: float) -> float:
    return max(0.1, deadline - time.monotonic())


class KafkaCluster:
    """Reads one cluster. `config` is a librdkafka config dict (see client_config)."""

    def __init__(self, name: str, config: dict, timeout: float = 15.0):
        self.name = name
        self.trap = LoginTrap(config.get("error_cb"))
        self.config = dict(config, error_cb=self.trap)
        self.timeout = timeout
        self._admin: AdminClient | None = None

    # -- security ---------------------------------------------------------------------------
    @property
    def principal(self) -> str:
        """The principal the brokers see: 'User:<sasl.username>', else Kafka's default names."""
        sasl = str(self.config.get("security.protocol", "")).upper().startswith("SASL")
        user = self.config.get("sasl.username")
        if user and sasl:
            return f"User:{user}"
        if sasl and str(self.config.get("sasl.mechanism", "")).upper() == "OAUTHBEARER":
            # the token's subject; "principal=<name>" in sasl.oauthbearer.config names it where the
            # token source follows librdkafka's convention (its unsecured JWTs, fleetlab.oauth)
            named = re.search(r"(?:^|\s)principal=(\S+)", str(self.config.get("sasl.oauthbearer.config", "")))
            return f"User:{named.group(1)}" if named else "the subject of the OAUTHBEARER token"
        if self.config.get("ssl.certificate.location"):
            from fleetkit.clients.wire_security import certificate_principal

            return certificate_principal(str(self.config["ssl.certificate.location"]))
        return "User:ANONYMOUS"

    def login_failed(self) -> None:
        """AuthenticationFailed when a librdkafka client of this cluster had its login refused:
        "authentication failed for <user> on <cluster>: <the broker's reason>" (never the password)."""
        if self.trap.reason is not None:
            user = self.config.get("sasl.username") or self.principal
            raise AuthenticationFailed(f"authentication failed for {user} on {self.name}: {self.trap.reason}")
        if self.trap.tls is not None:  # wire_security.wrap's words
            broker, reason = self.trap.tls
            raise TlsHandshakeFailed(f"TLS handshake with broker {broker} of cluster {self.name!r} failed: {reason}")

    def refused(self, error: str | None, resource_name: str | None, request: str | None = None) -> NotAuthorized | None:
        """The NotAuthorized of an authorization error (core.errors.AUTHORIZATION_ERRORS) met on this
        cluster by this principal; None for any other error."""
        if request in PRE_0_10 and not self.asks_api_versions:  # a 0.9 cluster's own ACL
            request = PRE_0_10[request]
        return refused(error, resource_name, self.principal, self.name, request) if error else None

    def _serve(self, client=None) -> None:
        """Serve librdkafka's callbacks (error_cb) of the admin client (or `client`), then raise a refused login."""
        c = client if client is not None else self._admin
        if c is not None:
            try:
                c.poll(0)
            except (RuntimeError, KafkaException):
                pass
        self.login_failed()

    def _result(self, fut: Future, timeout: float):
        """fut.result(timeout), but a refused login (error_cb) raises AuthenticationFailed within a
        fraction of a second instead of waiting out the request's timeout."""
        deadline = time.monotonic() + timeout
        while True:
            self._serve()
            try:
                return fut.result(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise
            except KafkaException:
                self._serve()
                raise

    def _list_topics(self, topic: str | None = None):
        """AdminClient.list_topics in short slices, so that a refused login is raised at once."""
        deadline = time.monotonic() + self.timeout
        while True:
            self._serve()
            try:
                return self.admin.list_topics(topic=topic, timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            except KafkaException as e:
                if error_name(e) != "_TIMED_OUT" or time.monotonic() >= deadline:
                    self._serve()
                    raise

    @property
    def bootstrap(self) -> str:
        return str(self.config.get("bootstrap.servers"))

    @property
    def wire_security(self):
        """The TLS / SASL settings of the toolkit's own protocol client (wire_security.Security), from
        the same librdkafka config; FleetConfigError naming a missing or wrong key."""
        if getattr(self, "_wire_security", None) is None:
            from fleetkit.clients import wire_security

            self._wire_security = wire_security.Security.from_config(self.config, self.name)
        return self._wire_security

    @property
    def asks_api_versions(self) -> bool:
        """False when the config says the brokers cannot answer ApiVersions (Kafka before 0.10)."""
        return str(self.config.get("api.version.request", True)).lower() not in ("false", "0")

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self.verify_login()
            self._admin = AdminClient(self.config)
        return self._admin

    def verify_login(self) -> None:
        """Secured connections (TLS or SASL the wire client speaks): log in once on the wire before
        the first admin request, so a wrong password or an untrusted certificate raises
        AuthenticationFailed / TlsHandshakeFailed within seconds (librdkafka retries a refused login
        until the request times out, without saying why). Brokers that do not answer are left to
        the request itself. Plaintext connections: nothing to do."""
        from fleetkit.clients import wire
        from fleetkit.clients.protocol import transport

        if not wire.supported(self.config):
            return
        security = self.wire_security
        if not (security.tls or security.sasl):
            return
        try:
            # a cluster before 0.10 is not asked ApiVersions: it leaves the question unanswered
            # until the client gives up (3 s for every login otherwise)
            transport.ask_first(self.bootstrap, "a login", lambda broker: None, timeout=min(self.timeout, 10.0),
                                api_versions=self.asks_api_versions, security=security)
        except ConnectionError:
            pass

    def _unreachable(self, what: str, exc: BaseException) -> ClusterUnreachable:
        return ClusterUnreachable(
            f"cluster {self.name!r} (bootstrap servers {self.bootstrap}) did not answer {what}: {exc}"
        )

    # -- coordinators ---------------------------------------------------------------------
    def coordinators(self, groups: Iterable[str]) -> dict[str, "kafka_wire.Answer"] | None:
        """Who the cluster names as each group's coordinator and what that broker answers
        (kafka_wire). None when the wire client cannot log in to the listener (a SASL mechanism
        other than PLAIN / SCRAM: use describe_groups instead)."""
        from fleetkit.clients import wire as kafka_wire

        if not kafka_wire.supported(self.config):
            return None
        try:
            return kafka_wire.probe(self.bootstrap, groups, timeout=self.timeout,
                                    api_versions=self.asks_api_versions, security=self.wire_security)
        except ConnectionError as e:
            raise self._unreachable("the coordinator lookup", e) from None

    def describe_with_coordinators(self, groups: Iterable[str]) -> tuple[dict[str, GroupDescription],
                                                                         dict[str, "kafka_wire.Answer"] | None]:
        """(descriptions, coordinator answers) in one pass: where the wire client logs in, the wire probe's
        lookup and DescribeGroups give both; elsewhere the admin client describes and the answers
        are None."""
        answers = self.coordinators(groups)
        if answers is None:
            return self.describe_groups(groups), None
        descs = {g: description_from_answer(a) for g, a in answers.items()}
        if self.asks_api_versions:
            self._describe_consumer_groups(descs, answers)
        return descs, answers

    def _describe_consumer_groups(self, descs: dict[str, GroupDescription], answers: dict) -> None:
        """DescribeGroups knows classic groups only: Kafka 4 answers GROUP_ID_NOT_FOUND (or Dead) for a
        KIP-848 consumer group. Those groups are described again through the admin client (which uses
        ConsumerGroupDescribe); where that finds a live consumer-type group, its description replaces
        the wire one and the answer's describe error is cleared (in place)."""
        import dataclasses

        again = [g for g, d in descs.items()
                 if (d.error == "GROUP_ID_NOT_FOUND" or (d.error is None and d.state == "Dead"))
                 and not (answers[g].lookup_error)]
        if not again:
            return
        for g, d in self.describe_groups(again).items():
            if d.error is None and d.group_type == "consumer":
                descs[g] = dataclasses.replace(d, coordinator_id=descs[g].coordinator_id
                                               if descs[g].coordinator_id is not None else d.coordinator_id)
                answers[g] = dataclasses.replace(answers[g], describe_error=None, state=d.state,
                                                 members=[(m.member_id, m.client_id, m.host) for m in d.members])

    # -- metadata -------------------------------------------------------------------------
    def leader_epochs(self, topics: Iterable[str]) -> "tuple[list[kafka_wire.PartitionLeader], dict[str, str]] | None":
        """Partitions of `topics` with leader, leader epoch and ISR, and {topic: error} (Metadata v7+
        on the wire; topics are never auto-created). None when the wire client cannot log in (GSSAPI, OAUTHBEARER) or the
        brokers predate leader epochs in metadata (Kafka 1.0)."""
        from fleetkit.clients import wire as kafka_wire

        if not kafka_wire.supported(self.config) or not self.asks_api_versions:
            return None
        try:
            return kafka_wire.partition_leaders(self.bootstrap, topics, timeout=self.timeout,
                                                security=self.wire_security)
        except ConnectionError as e:
            raise self._unreachable("a metadata request", e) from None

    def metadata(self, topics: Iterable[str] | None = None) -> Metadata:
        try:
            if topics is None:
                md = self._list_topics()
                mds = [md]
            else:
                mds = [self._list_topics(t) for t in sorted(set(topics))]
        except KafkaException as e:
            raise self._unreachable("a metadata request", e) from None
        first = mds[0] if mds else self._list_topics()
        out = Metadata(
            brokers={b.id: f"{b.host}:{b.port}" for b in first.brokers.values()},
            controller_id=first.controller_id if first.controller_id >= 0 else None,
        )
        for md in mds:
            for tname, tmeta in md.topics.items():
                if tmeta.error is not None and not tmeta.partitions:
                    continue
                for pid, pm in tmeta.partitions.items():
                    out.partitions[(tname, pid)] = PartitionMeta(
                        topic=tname, partition=pid, leader=pm.leader,
                        replicas=tuple(pm.replicas), isr=tuple(pm.isrs),
                        error=pm.error.name() if pm.error is not None else None,
                    )
        return out

    def cluster_id(self) -> str | None:
        """The cluster id the brokers report in metadata (Kafka 0.10.1 and later); None before."""
        try:
            md = self._list_topics()
        except KafkaException as e:
            raise self._unreachable("a metadata request", e) from None
        return md.cluster_id or None

    def cluster_operations(self) -> set[str] | None:
        """The ACL operations this principal may perform on the cluster resource (DescribeCluster with
        authorized operations, Kafka 2.8+), e.g. {"DESCRIBE", "DESCRIBE_CONFIGS"}; None when the
        brokers do not say."""
        if not self.asks_api_versions:
            return None
        try:
            d = self._result(self.admin.describe_cluster(include_authorized_operations=True,
                                                         request_timeout=self.timeout), self.timeout + 5)
        except (KafkaException, TimeoutError, TypeError, AttributeError):
            return None
        # asked for and answered (DescribeCluster is Kafka 2.8+): librdkafka gives None for "none at all"
        ops = getattr(d, "authorized_operations", None) or []
        return {getattr(op, "name", str(op)).upper() for op in ops}

    def listing_refusal(self) -> NotAuthorized | None:
        """Without DESCRIBE on the cluster, ListGroups silently lists only the groups the principal may
        describe: a NotAuthorized naming the missing permission (None when it has it, or the brokers
        do not say)."""
        ops = self.cluster_operations()
        if ops is None or "DESCRIBE" in ops or "ALL" in ops:
            return None
        return NotAuthorized("DESCRIBE", "cluster", "kafka-cluster", self.principal, self.name,
                             "ListGroups then lists only the groups it may describe")

    # -- groups ---------------------------------------------------------------------------
    def list_groups(self, errors: list[str] | None = None) -> list[tuple[str, str]]:
        """(group, state) of every group the brokers list. Some brokers failing is logged and, when
        `errors` is given, appended to it (the groups those brokers coordinate are then missing)."""
        return [(g, s) for g, s, _ in self.list_groups_typed(errors)]

    def list_groups_typed(self, errors: list[str] | None = None) -> list[tuple[str, str, str | None]]:
        """(group, state, type) of every listed group; type is 'classic' or 'consumer' where the
        brokers say (ListGroups v5, Kafka 3.8+), else None."""
        try:
            res = self._result(self.admin.list_consumer_groups(request_timeout=self.timeout), self.timeout + 5)
        except (KafkaException, TimeoutError) as e:
            raise self._unreachable("ListGroups", e) from None
        # a broker loading a __consumer_offsets partition answers COORDINATOR_LOAD_IN_PROGRESS
        # (0.9: while any partition loads; the incident's state, not an unreachable cluster): the
        # groups of the others are listed, the loading broker's are missing, as when some fail
        if res.errors and not res.valid and not all(error_name(e) in LOAD_IN_PROGRESS for e in res.errors):
            first = res.errors[0]
            refusal = self.refused(error_name(first), None, "ListGroups")
            if refusal is not None:
                raise refusal
            raise self._unreachable("ListGroups", first)
        for err in res.errors:
            log.warning("cluster %s: ListGroups partly failed: %s", self.name, err)
            if errors is not None:
                errors.append(str(err))
        return sorted((g.group_id, state_name(g.state), type_name(getattr(g, "type", None))) for g in res.valid)

    def describe_groups(self, groups: Iterable[str], batch: int = 200) -> dict[str, GroupDescription]:
        groups = list(dict.fromkeys(groups))
        out: dict[str, GroupDescription] = {}
        for i in range(0, len(groups), batch):
            chunk = groups[i:i + batch]
            futures = self.admin.describe_consumer_groups(chunk, request_timeout=self.timeout)
            for g, fut in futures.items():
                out[g] = self._description(g, fut)
        return out

    def _description(self, group: str, fut: Future) -> GroupDescription:
        try:
            d = self._result(fut, self.timeout + 5)
        except (KafkaException, TimeoutError) as e:
            return GroupDescription(group=group, state="Unknown", coordinator_id=None, error=error_name(e))
        members = []
        for m in d.members:
            assignment = None
            if m.assignment is not None and m.assignment.topic_partitions is not None:
                assignment = tuple(sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions))
            members.append(Member(member_id=m.member_id, client_id=m.client_id, host=strip_host(m.host),
                                  assignment=assignment, reported_host=m.host or ""))
        node = d.coordinator
        return GroupDescription(group=group, state=state_name(d.state), coordinator_id=node.id if node else None,
                                members=tuple(members), group_type=type_name(getattr(d, "type", None)),
                                assignor=d.partition_assignor or None,
                                coordinator=f"{node.host}:{node.port}" if node else None)

    def committed_offsets(self, groups: Iterable[str]) -> dict[str, dict[tuple[str, int], int | None] | str]:
        """Per group: {(topic, partition): committed offset or None}, or the error name.

        All partitions the group has committed for are returned (OffsetFetch for the whole
        group); the requests run concurrently, one per group (librdkafka's admin API takes one
        group per request).
        """
        groups = list(dict.fromkeys(groups))
        futures: dict[str, Future] = {}
        for g in groups:
            futures.update(self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g)], request_timeout=self.timeout))
        out: dict[str, dict[tuple[str, int], int | None] | str] = {}
        deadline = time.monotonic() + self.timeout + 5  # one deadline for all: the requests run concurrently
        for g, fut in futures.items():
            try:
                res = self._result(fut, _remaining(deadline))
            except (KafkaException, TimeoutError) as e:
                out[g] = error_name(e)
                continue
            offs: dict[tuple[str, int], int | None] = {}
            for tp in res.topic_partitions or []:
                if tp.error is not None:
                    continue
                offs[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
            out[g] = offs
        return out

    def log_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int | None, int | None, str | None]]:
        """(log start, log end, error) for each partition; None where the broker did not answer."""
        parts = sorted(set(partitions))
        out: dict[tuple[str, int], tuple[int | None, int | None, str | None]] = {}
        if not parts:
            return out
        results = self._list_offsets(parts)
        # a topic the principal may not DESCRIBE: librdkafka says only that its partitions are unknown
        unknown = ("_NOENT", "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "TOPIC_AUTHORIZATION_FAILED")
        refused_topics = self.refused_topics({t for (t, _), (_, err) in results["start"].items() if err in unknown})
        # a topic created moments ago (__consumer_offsets at a cluster's first group) may be missing from
        # librdkafka's metadata cache: those partitions are asked once more, a second later
        again = [k for k in parts if k[0] not in refused_topics and any(
            results[s].get(k, (None, None))[1] in unknown for s in ("start", "end"))]
        if again:
            time.sleep(1.0)
            for spec_name, res in self._list_offsets(again).items():
                results[spec_name].update(res)
        for key in parts:
            start, err1 = results["start"].get(key, (None, "NO_ANSWER"))
            end, err2 = results["end"].get(key, (None, "NO_ANSWER"))
            out[key] = (start, end, refused_topics.get(key[0]) or err1 or err2)
        return out

    def _list_offsets(self, parts: list[tuple[str, int]]) -> dict[str, dict[tuple[str, int], tuple]]:
        """{"start"|"end": {partition: (offset, error name)}} of one ListOffsets of each kind."""
        results: dict[str, dict] = {}
        for spec_name, spec in (("start", OffsetSpec.earliest()), ("end", OffsetSpec.latest())):
            req = {TopicPartition(t, p): spec for t, p in parts}
            try:
                futs = self.admin.list_offsets(req, request_timeout=self.timeout)
            except KafkaException as e:
                raise self._unreachable("ListOffsets", e) from None
            res = {}
            deadline = time.monotonic() + self.timeout + 5
            for tp, fut in futs.items():
                try:
                    res[(tp.topic, tp.partition)] = (self._result(fut, _remaining(deadline)).offset, None)
                except (KafkaException, TimeoutError) as e:
                    res[(tp.topic, tp.partition)] = (None, error_name(e))
            results[spec_name] = res
        return results

    def refused_topics(self, topics: set[str]) -> dict[str, str]:
        """{topic: TOPIC_AUTHORIZATION_FAILED} of the topics metadata refuses to describe (librdkafka's
        ListOffsets says only _NOENT / unknown partition for a topic the principal may not DESCRIBE).
        Asked on the wire where it can be (Metadata v7+ never auto-creates a topic); never on brokers
        before 0.10, whose Metadata creates the topics it is asked about."""
        out: dict[str, str] = {}
        if not topics or not self.asks_api_versions:
            return out
        try:
            got = self.leader_epochs(sorted(topics))
        except (ClusterUnreachable, ConnectionError):
            got = None
        if got is not None:
            return {t: e for t, e in got[1].items() if e == "TOPIC_AUTHORIZATION_FAILED"}
        for t in sorted(topics):
            try:
                tmeta = self._list_topics(t).topics.get(t)
            except KafkaException:
                continue
            if tmeta is not None and tmeta.error is not None and tmeta.error.name() == "TOPIC_AUTHORIZATION_FAILED":
                out[t] = "TOPIC_AUTHORIZATION_FAILED"
        return out

    RETRIABLE = ("NOT_COORDINATOR", "NOT_COORDINATOR_FOR_GROUP", "COORDINATOR_LOAD_IN_PROGRESS",
                 "COORDINATOR_NOT_AVAILABLE", "GROUP_COORDINATOR_NOT_AVAILABLE", "GROUP_LOAD_IN_PROGRESS",
                 "_TIMED_OUT", "_TRANSPORT", "TIMED_OUT")

    def commit_offsets(self, group: str, offsets: dict[tuple[str, int], int], retry_for: float = 0.0,
                       metadata: dict[tuple[str, int], str] | None = None) -> None:
        """Commit offsets for a group without joining it (the group must have no live members:
        the coordinator rejects a simple commit for a group that is rebalancing or stable).
        With retry_for, coordinator errors (a partition still loading) are retried that long.
        `metadata`: the commit metadata of some partitions (librdkafka stores it with a trailing
        NUL; the others get none)."""
        deadline = time.monotonic() + retry_for
        while True:
            try:
                return self._commit_once(group, offsets, metadata or {})
            except ClusterUnreachable as e:
                if time.monotonic() >= deadline or not any(code in str(e) for code in self.RETRIABLE):
                    raise
                time.sleep(0.5)

    def _commit_once(self, group: str, offsets: dict[tuple[str, int], int],
                     metadata: dict[tuple[str, int], str]) -> None:
        from confluent_kafka import Consumer

        self.verify_login()  # a synchronous commit waits out its timeout on a refused login
        c = Consumer(dict(self.config, **{"group.id": group, "enable.auto.commit": False}))
        try:
            res = c.commit(offsets=[TopicPartition(t, p, o) if metadata.get((t, p)) is None
                                    else TopicPartition(t, p, o, metadata=metadata[(t, p)])
                                    for (t, p), o in sorted(offsets.items())],
                           asynchronous=False)
        except KafkaException as e:
            self.login_failed()
            refusal = self.refused(error_name(e), group, "OffsetCommit")
            if refusal is not None:
                raise refusal from None
            raise ClusterUnreachable(f"cluster {self.name!r}: committing offsets for group {group!r} failed: "
                                     f"{error_name(e)}") from None
        finally:
            c.close()
        self._partition_refusal(res, group, "OffsetCommit")
        errors = [f"{tp.topic}-{tp.partition}: {tp.error}" for tp in res or [] if tp.error is not None]
        if errors:
            raise ClusterUnreachable(f"cluster {self.name!r}: commit for group {group!r} failed for {', '.join(errors)}")

    def raise_refusal(self, error: str | None, resource_name: str | None, request: str | None = None) -> None:
        """Raise the one-line NotAuthorized of an authorization error (refused); nothing for any other."""
        refusal = self.refused(error, resource_name, request)
        if refusal is not None:
            raise refusal from None

    def _partition_refusal(self, partitions, group: str, request: str) -> None:
        """The one-line NotAuthorized of the first partition an offset request was refused for: the
        group's (GROUP_AUTHORIZATION_FAILED) or the partition's topic (TOPIC_AUTHORIZATION_FAILED)."""
        for tp in partitions or []:
            if tp.error is None:
                continue
            name = error_name(tp.error)
            self.raise_refusal(name, tp.topic if name.startswith("TOPIC_") else group, request)

    def alter_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Set a group's committed offsets through the Admin API (AlterConsumerGroupOffsets, brokers
        that answer ApiVersions: 0.10+). The broker refuses it while the group has live members."""
        from confluent_kafka import ConsumerGroupTopicPartitions as CGTP

        req = CGTP(group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])
        try:
            fut = self.admin.alter_consumer_group_offsets([req], request_timeout=self.timeout)[group]
            res = self._result(fut, self.timeout + 5)
        except (KafkaException, TimeoutError) as e:
            refusal = self.refused(error_name(e), group, "AlterConsumerGroupOffsets")
            if refusal is not None:
                raise refusal from None
            raise ClusterUnreachable(f"cluster {self.name!r}: altering the offsets of group {group!r} failed: "
                                     f"{error_name(e)}") from None
        self._partition_refusal(res.topic_partitions, group, "AlterConsumerGroupOffsets")
        errors = [f"{tp.topic}-{tp.partition}: {tp.error}" for tp in res.topic_partitions or [] if tp.error is not None]
        if errors:
            raise ClusterUnreachable(f"cluster {self.name!r}: altering the offsets of group {group!r} failed for "
                                     f"{', '.join(errors)}")

    def group_offsets(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """Committed offsets of specific partitions (None: no commit)."""
        futs = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in partitions])],
            request_timeout=self.timeout)
        try:
            res = self._result(next(iter(futs.values())), self.timeout + 5)
        except (KafkaException, TimeoutError) as e:
            refusal = self.refused(error_name(e), group, "OffsetFetch")
            if refusal is not None:
                raise refusal from None
            raise ClusterUnreachable(f"cluster {self.name!r}: offsets of group {group!r} not readable: "
                                     f"{error_name(e)}") from None
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in res.topic_partitions}

    def _peek_consumer(self, **extra):
        """A consumer that only looks: a throwaway group id, no commits, no offset reset."""
        import uuid

        from confluent_kafka import Consumer

        return Consumer(dict(self.config, **{"group.id": f"fleetkit-peek-{uuid.uuid4().hex}",
                                             "enable.auto.commit": False, "auto.offset.reset": "error", **extra}))

    def record_at(self, topic: str, partition: int, offset: int, timeout: float = 10.0) -> dict | None:
        """The record at an offset: offset, timestamp (None on 0.9, whose messages carry none),
        key (shown escaped, truncated) and value size -- never the value itself."""
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

        c = self._peek_consumer()
        try:
            c.assign([TopicPartition(topic, partition, offset)])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                msg = c.poll(0.5)
                self.login_failed()
                if msg is None:
                    continue
                if msg.error() is not None:
                    return {"offset": offset, "error": msg.error().name()}
                ts_type, ts = msg.timestamp()
                key = msg.key()
                return {"offset": msg.offset(), "timestamp": None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts,
                        "key": None if key is None else repr(key[:120]) + ("..." if len(key) > 120 else ""),
                        "size": len(msg.value() or b"")}
            return None
        finally:
            c.close()

    def offsets_for_times(self, partitions: list[tuple[str, int]], at_ms: int,
                          timeout: float = 10.0) -> dict[tuple[str, int], int | None]:
        """The offset of each partition's first record with a timestamp at or after `at_ms` (epoch
        milliseconds; ListOffsets by time, Kafka 0.10.1+); None where no record is that new."""
        c = self._peek_consumer()
        try:
            res = c.offsets_for_times([TopicPartition(t, p, int(at_ms)) for t, p in partitions], timeout)
        except KafkaException as e:
            raise self._unreachable("ListOffsets by time", e) from None
        finally:
            c.close()
        out = {}
        for tp in res:
            if tp.error is not None:
                refusal = self.refused(error_name(tp.error), tp.topic, "ListOffsets")
                if refusal is not None:
                    raise refusal
                raise ClusterUnreachable(f"cluster {self.name!r}: the offset at a time of {tp.topic}-{tp.partition} "
                                         f"not readable: {error_name(tp.error)}")
            out[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return out

    def record_timestamps(self, positions: dict[tuple[str, int], int],
                          timeout: float = 5.0) -> dict[tuple[str, int], float | None]:
        """The timestamp (epoch seconds, CreateTime or LogAppendTime as the topic keeps it) of the
        record at each (topic, partition) -> offset, read with one consumer that takes the first
        record of each partition and pauses it; None where the record carries no timestamp (0.9's
        message format), could not be read within `timeout`, or the read failed. Only offsets, keys
        and timestamps are looked at; small fetches keep the cost bounded."""
        from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

        out: dict[tuple[str, int], float | None] = {tp: None for tp in positions}
        if not positions:
            return out
        c = self._peek_consumer(**{"fetch.max.bytes": 1 << 20, "max.partition.fetch.bytes": 64 << 10,
                                   "enable.partition.eof": False})
        waiting = set(positions)
        denied: set[str] = set()
        try:
            c.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
            deadline = time.monotonic() + timeout
            while waiting and time.monotonic() < deadline:
                msgs = c.consume(num_messages=500, timeout=0.05)  # (it waits its timeout unless 500 came)
                self.login_failed()
                for msg in msgs:
                    tp = (msg.topic(), msg.partition())
                    if tp not in waiting:
                        continue
                    waiting.discard(tp)
                    c.pause([TopicPartition(*tp)])
                    if msg.error() is not None and msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                        denied.add(tp[0])
                    if msg.error() is not None or msg.offset() != positions[tp]:
                        continue  # an error, or the record was compacted away: no timestamp for it
                    ts_type, ts = msg.timestamp()
                    if ts_type != TIMESTAMP_NOT_AVAILABLE and ts is not None and ts >= 0:
                        out[tp] = ts / 1000.0
            for topic in sorted(denied):  # a missing ACL is named, never a silent "no timestamp"
                log.warning("cluster %s: record timestamps of topic %s not read: %s", self.name,
                            visible_controls(topic), self.refused("TOPIC_AUTHORIZATION_FAILED", topic, "Fetch"))
            if waiting:
                log.info("cluster %s: record timestamps: %d of %d partition(s) not read within %.0fs",
                         self.name, len(waiting), len(positions), timeout)
        except KafkaException as e:
            log.warning("cluster %s: record timestamps not readable: %s", self.name, error_name(e))
        finally:
            c.close()
        return out

    def close(self) -> None:
        self._admin = None
