"""The fleet file: which clusters the toolkit looks after and how to reach them.

A fleet file is YAML::

    version: 1
    clusters:
      - name: lab                        # [A-Za-z0-9_.-], unique
        kafka_version: "0.9.0.1"         # quoted; decides client protocol settings (0.9 needs fallbacks)
        kafka_conn_id: lab_kafka         # Airflow connection (type kafka), holds bootstrap.servers
        runbook_kafka_conn_id: lab_kafka_runbook  # optional: the destructive runbooks' principal
        zookeeper:                       # ZooKeeper-mode clusters only
          conn_id: lab_zookeeper         # Airflow connection (type zookeeper)
          runbook_conn_id: lab_zookeeper_runbook  # optional: the ZooKeeper identity of znode writes
          chroot: /kafka
        offsets_topic_partitions: 50
        groups: [billing]                # always collected, even when the cluster forgot them
        approvers: [alice]               # who may approve plans (required for destructive runbooks)
        cleaner:                         # when the broker cannot report it (0.9: no DescribeConfigs)
          dedupe_buffer_size: 134217728
          threads: 1
          io_buffer_load_factor: 0.9
        brokers:
          - id: 0
            log_dirs: [/var/lib/kafka/data]   # relative paths resolve against the fleet file; at least
                                               # two folders below / (ssh: absolute on the host)
            access: local                      # local | ssh
            ssh_conn_id: broker0_ssh           # with access: ssh
        broker_control:                  # optional: how runbooks stop, start, reconfigure a broker
          stop:  [/usr/local/bin/kafkactl, stop, "{broker}"]       # argv lists, run without a shell
          start: [/usr/local/bin/kafkactl, start, "{broker}"]      # in the fleet file's folder
          set_config: [/usr/local/bin/kafkactl, config, "{broker}", "{key}={value}"]  # optional
          timeout: 10m                   # per command; default 10m
        group_id_mappings:               # optional: KoP client-to-group znodes in this ZooKeeper
          root: /client_group_id         # below the chroot; default /client_group_id
          create_missing_unattended: true  # the scheduled DAG creates MISSING mappings itself
          grace: 1h                      # a znode without live member older than this is STALE
        offset_stores:                   # optional: consumer offsets kept in ZooKeeper, not Kafka
          - kind: zookeeper              # the old high-level consumer: <root>/<group>/offsets/<topic>/<p>
            conn_id: lab_zookeeper       # Airflow connection (type zookeeper) of that ZooKeeper
            runbook_conn_id: lab_zookeeper_runbook  # optional: the connection of offset resets
            chroot: /kafka               # optional chroot of the connection
            root: /consumers             # default /consumers (members: <root>/<group>/ids)
            groups: [legacy-billing]     # optional filter: only these groups
          - kind: storm                  # storm-kafka spouts: <root>/<spout id>/partition_<N> (JSON)
            conn_id: storm_zookeeper     # often Storm's own ZooKeeper, not the cluster's
            root: /kafka-spouts          # the spouts' zkRoot (required for storm)
            spouts: [clicks-spout]       # optional filter: only these spout ids
            storm_root: /storm           # Storm's storm.zookeeper.root in the same connection (default
                                         # /storm): whether a spout's topology runs (fleetkit.collection.storm_state)

    alerts:                              # optional: besides the task log, where alerts go
      smtp_conn_id: smtp_default         # e-mail (Airflow connection, type smtp) ...
      to: [oncall@example.com]           # ... to these recipients (required with smtp_conn_id)
      slack_webhook_conn_id: fleet_slack # Slack incoming webhook (connection type slackwebhook)
      pagerduty_conn_id: fleet_pagerduty # PagerDuty Events API v2 (connection type pagerduty_events)
      pagerduty_severity: warning        # info | warning | error | critical (default warning)
      approval_channels: [slack]         # told when a runbook waits for approval (default: every channel)

Credentials never live here: they live in Airflow connections.

Two principals (``Cluster.kafka_conn_id_for`` and friends choose): the scheduled, read-only DAGs
and the incident CLI use `kafka_conn_id` / `zookeeper.conn_id` / a store's `conn_id`; every step
that CHANGES a cluster (offset commits, resets and deletes, reassignments and leader elections,
broker config changes, znode writes, the trim's broker-side steps: a runbook's execute and
teardown, the unattended group-id mapping writer, fleetctl trim resume / restore) uses
`runbook_kafka_conn_id` / `zookeeper.runbook_conn_id` / a store's `runbook_conn_id`, each
defaulting to its read-only counterpart when absent (one principal for both). A store on the
cluster's own ZooKeeper connection (same conn_id) without its own runbook_conn_id follows
`zookeeper.runbook_conn_id`.

broker_control placeholders ({broker}; also {key} and {value} in set_config) are replaced inside
each argv element, so a value stays one argument whatever it holds; {{ and }} are literal braces.
Without broker_control, runbooks that restart brokers refuse to execute and leave the rendered
shell runbooks to the operator.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetkit.core.durations import parse_duration_seconds
from fleetkit.core.errors import FleetConfigError
from fleetkit.core.kafka_names import DEFAULT_OFFSETS_PARTITIONS as DEFAULT_OFFSETS_TOPIC_PARTITIONS

CLUSTER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CONN_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,250}$")
VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+){0,2}$")

DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024
DEFAULT_CLEANER_THREADS = 1
DEFAULT_LOAD_FACTOR = 0.9


@dataclass(frozen=True)
class CleanerSettings:
    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE
    threads: int = DEFAULT_CLEANER_THREADS
    io_buffer_load_factor: float = DEFAULT_LOAD_FACTOR


@dataclass(frozen=True)
class Broker:
    id: int
    log_dirs: tuple[str, ...] = ()
    access: str = "local"
    ssh_conn_id: str | None = None


BROKER_CONTROL_COMMANDS = {"stop": ("broker",), "start": ("broker",), "set_config": ("broker", "key", "value")}
DEFAULT_BROKER_CONTROL_TIMEOUT_SECONDS = 600.0
_PLACEHOLDER_RE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")


def argv_placeholders(element: str) -> list[str]:
    """The placeholder names in one argv element; ValueError on a brace that opens none."""
    names = []
    for m in _PLACEHOLDER_RE.finditer(element):
        if m.group(0) in ("{{", "}}"):
            continue
        if m.group(1) is None:
            raise ValueError(f"{element!r} has a lone {m.group(0)!r} (write {{{{ or }}}} for a literal brace)")
        names.append(m.group(1))
    return names


def fill_argv(template: tuple[str, ...], values: dict[str, Any]) -> list[str]:
    """The template's elements with each {name} replaced by str(values[name]), in one pass (a
    value is never expanded again): one element in, one argument out."""
    def one(m: re.Match) -> str:
        if m.group(0) in ("{{", "}}"):
            return m.group(0)[0]
        if m.group(1) is None:
            raise ValueError(f"lone {m.group(0)!r} in a command template")
        return str(values[m.group(1)])

    return [_PLACEHOLDER_RE.sub(one, e) for e in template]


@dataclass(frozen=True)
class BrokerControlSettings:
    """Commands that stop, start and reconfigure one broker: argv templates run without a shell,
    in `cwd` (the fleet file's folder)."""

    stop: tuple[str, ...]
    start: tuple[str, ...]
    set_config: tuple[str, ...] | None = None
    cwd: str = "."
    timeout_seconds: float = DEFAULT_BROKER_CONTROL_TIMEOUT_SECONDS

    def argv(self, command: str, **values: Any) -> list[str]:
        template = getattr(self, command) if command in BROKER_CONTROL_COMMANDS else None
        if template is None:
            raise FleetConfigError(f"broker_control has no {command} command")
        return fill_argv(template, values)


@dataclass(frozen=True)
class ZooKeeperSettings:
    conn_id: str
    chroot: str = ""
    runbook_conn_id: str | None = None  # None: conn_id

    def conn_id_for(self, changes: bool = False) -> str:
        """The connection of a step: the runbook's for one that writes znodes, else the read-only one."""
        return (self.runbook_conn_id or self.conn_id) if changes else self.conn_id


DEFAULT_GROUP_ID_ROOT = "/client_group_id"
DEFAULT_GROUP_ID_GRACE_SECONDS = 3600.0


@dataclass(frozen=True)
class GroupIdMappingSettings:
    """KoP-style client-to-group mappings (<root>/<ip>-<clientId> = group id) to reconcile."""

    root: str = DEFAULT_GROUP_ID_ROOT
    create_missing_unattended: bool = True
    grace_seconds: float = DEFAULT_GROUP_ID_GRACE_SECONDS


OFFSET_STORE_KINDS = ("zookeeper", "storm")
DEFAULT_CONSUMERS_ROOT = "/consumers"
#: Storm's storm.zookeeper.root default (org.apache.storm conf/defaults.yaml)
DEFAULT_STORM_ROOT = "/storm"


@dataclass(frozen=True)
class OffsetStoreSettings:
    """Consumer offsets kept in a ZooKeeper: the old high-level consumer's (kind zookeeper,
    <root>/<group>/offsets/<topic>/<partition>) or storm-kafka spouts' (kind storm,
    <root>/<spout id>/partition_<N>, JSON). `groups` / `spouts`: only these (empty: all).
    `storm_root` (storm): Storm's own root (storm.zookeeper.root) in the same ZooKeeper and chroot,
    where the spouts' topologies are registered (fleetkit.collection.storm_state)."""

    kind: str
    conn_id: str
    root: str
    chroot: str = ""
    groups: tuple[str, ...] = ()
    spouts: tuple[str, ...] = ()
    runbook_conn_id: str | None = None  # None: conn_id
    storm_root: str = DEFAULT_STORM_ROOT

    def conn_id_for(self, changes: bool = False) -> str:
        """The connection of a step: the runbook's for an offset reset, else the read-only one."""
        return (self.runbook_conn_id or self.conn_id) if changes else self.conn_id

    @property
    def source(self) -> str:
        """The offsets_snapshots `source` of its rows."""
        return self.kind


@dataclass(frozen=True)
class Cluster:
    name: str
    kafka_conn_id: str
    kafka_version: str = "2.8.0"
    zookeeper: ZooKeeperSettings | None = None
    offsets_topic_partitions: int = DEFAULT_OFFSETS_TOPIC_PARTITIONS
    groups: tuple[str, ...] = ()
    approvers: tuple[str, ...] = ()
    cleaner: CleanerSettings = field(default_factory=CleanerSettings)
    brokers: tuple[Broker, ...] = ()
    group_id_mappings: GroupIdMappingSettings | None = None  # None: no KoP mappings, skipped
    broker_control: BrokerControlSettings | None = None  # None: brokers are restarted by hand
    offset_stores: tuple[OffsetStoreSettings, ...] = ()  # consumer offsets kept in ZooKeeper
    fleet_file: str = field(default="", compare=False)  # the file it was read from, for messages
    runbook_kafka_conn_id: str | None = None  # the destructive runbooks' principal; None: kafka_conn_id

    def kafka_conn_id_for(self, changes: bool = False) -> str:
        """The Kafka connection of a step: `runbook_kafka_conn_id` (default `kafka_conn_id`) for a
        step that changes the cluster, `kafka_conn_id` (read-only principal) for every other."""
        return (self.runbook_kafka_conn_id or self.kafka_conn_id) if changes else self.kafka_conn_id

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return version_tuple(self.kafka_version)

    @property
    def needs_protocol_fallback(self) -> bool:
        """Brokers before 0.10 cannot answer ApiVersions: clients must be told the version."""
        return self.version_tuple < (0, 10)

    @property
    def zk_mode(self) -> bool:
        return self.zookeeper is not None

    def require_approvers(self) -> tuple[str, ...]:
        """The cluster's approvers; FleetConfigError when the fleet file names none."""
        if not self.approvers:
            raise FleetConfigError(
                f"fleet file {self.fleet_file or '<fleet>'}: cluster {self.name}: `approvers` is required for "
                f"destructive runbooks (add `approvers: [user, ...]` under the cluster: the Airflow users who "
                f"may approve its plans)")
        return self.approvers

    def broker(self, broker_id: int) -> Broker:
        for b in self.brokers:
            if b.id == broker_id:
                return b
        raise FleetConfigError(f"cluster {self.name!r} has no broker with id {broker_id} in the fleet file")


#: the channels an alert can go to besides the task log (the fleet file's `alerts:` names them)
ALERT_CHANNELS = ("smtp", "slack", "pagerduty")
#: PagerDuty Events API v2 severities
PAGERDUTY_SEVERITIES = ("info", "warning", "error", "critical")


@dataclass(frozen=True)
class AlertSettings:
    """Where alerts go besides the task log: e-mail through an Airflow SMTP connection, a Slack
    incoming webhook and a PagerDuty service (each an Airflow connection holding its secret: the
    webhook URL, the routing key). `approval_channels`: the channels told when a runbook waits for an
    approver (None: every configured channel)."""

    smtp_conn_id: str | None = None
    to: tuple[str, ...] = ()
    subject_prefix: str = "[kafka-fleet]"
    slack_webhook_conn_id: str | None = None
    pagerduty_conn_id: str | None = None
    pagerduty_severity: str = "warning"
    approval_channels: tuple[str, ...] | None = None

    @property
    def channels(self) -> tuple[str, ...]:
        """The configured channels, in ALERT_CHANNELS' order."""
        conn = {"smtp": self.smtp_conn_id, "slack": self.slack_webhook_conn_id, "pagerduty": self.pagerduty_conn_id}
        return tuple(c for c in ALERT_CHANNELS if conn[c])

    @property
    def approval_notice_channels(self) -> tuple[str, ...]:
        """The channels told when an approval waits."""
        return self.channels if self.approval_channels is None else self.approval_channels


@dataclass(frozen=True)
class Fleet:
    path: str
    clusters: tuple[Cluster, ...]
    alerts: AlertSettings = field(default_factory=AlertSettings)

    def cluster(self, name: str) -> Cluster:
        for c in self.clusters:
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.clusters) or "none"
        raise FleetConfigError(f"{self.path}: no cluster named {name!r} (clusters: {known})")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.clusters]


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


class _Field:
    """Walks a parsed YAML document, naming the exact field in every error."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, where: str, msg: str) -> FleetConfigError:
        return FleetConfigError(f"{self.path}: {where}: {msg}")

    def mapping(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        return value

    def unknown(self, value: dict, allowed: set[str], where: str) -> None:
        extra = sorted(str(k) for k in value if k not in allowed)
        if extra:
            raise self.fail(where, f"unknown field(s) {', '.join(extra)} (allowed: {', '.join(sorted(allowed))})")

    def string(self, value: Any, where: str, pattern: re.Pattern | None = None, what: str = "") -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"expected a non-empty string, got {value!r}")
        if pattern is not None and not pattern.match(value):
            raise self.fail(where, f"{value!r} is not a valid {what or 'value'} (must match {pattern.pattern})")
        return value

    def integer(self, value: Any, where: str, minimum: int | None = None, maximum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(where, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.fail(where, f"must be <= {maximum}, got {value}")
        return value

    def number(self, value: Any, where: str, low: float, high: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"expected a number, got {value!r}")
        if not (low < value <= high):
            raise self.fail(where, f"must be in ({low}, {high}], got {value}")
        return float(value)

    def strings(self, value: Any, where: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list of strings, got {type(value).__name__}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str) or item == "":
                raise self.fail(f"{where}[{i}]", f"expected a non-empty string, got {item!r}")
            out.append(item)
        return tuple(out)


def _parse_cluster(f: _Field, raw: Any, where: str, base_dir: Path) -> Cluster:
    raw = f.mapping(raw, where)
    allowed = {"name", "kafka_version", "kafka_conn_id", "runbook_kafka_conn_id", "zookeeper",
               "offsets_topic_partitions", "groups", "approvers", "cleaner", "brokers", "group_id_mappings", "broker_control",
               "offset_stores"}
    f.unknown(raw, allowed, where)
    for required in ("name", "kafka_conn_id"):
        if required not in raw:
            raise f.fail(where, f"missing required field {required!r}")
    name = f.string(raw["name"], f"{where}.name", CLUSTER_NAME_RE, "cluster name")
    where = f"clusters[{name}]"
    kafka_conn_id = f.string(raw["kafka_conn_id"], f"{where}.kafka_conn_id", CONN_ID_RE, "connection id")
    runbook_kafka_conn_id = None
    if raw.get("runbook_kafka_conn_id") is not None:
        runbook_kafka_conn_id = f.string(raw["runbook_kafka_conn_id"], f"{where}.runbook_kafka_conn_id", CONN_ID_RE,
                                         "connection id")
    kafka_version = raw.get("kafka_version", "2.8.0")
    if not isinstance(kafka_version, str):
        number = isinstance(kafka_version, (int, float)) and not isinstance(kafka_version, bool)
        hint = (f" (YAML reads an unquoted version such as 0.10 as the number {kafka_version!r}): quote it, "
                f'e.g. kafka_version: "0.10.2.1"') if number else ""
        raise f.fail(f"{where}.kafka_version", f"expected a version string, got {type(kafka_version).__name__} "
                                               f"{kafka_version!r}{hint}")
    if not VERSION_RE.match(kafka_version):
        raise f.fail(f"{where}.kafka_version", f"{kafka_version!r} is not a version like 0.9.0.1")

    zk = None
    if raw.get("zookeeper") is not None:
        zraw = f.mapping(raw["zookeeper"], f"{where}.zookeeper")
        f.unknown(zraw, {"conn_id", "runbook_conn_id", "chroot"}, f"{where}.zookeeper")
        if "conn_id" not in zraw:
            raise f.fail(f"{where}.zookeeper", "missing required field 'conn_id'")
        chroot = zraw.get("chroot") or ""
        if chroot:
            chroot = f.string(chroot, f"{where}.zookeeper.chroot")
            if not chroot.startswith("/") or chroot.endswith("/") or "//" in chroot:
                raise f.fail(f"{where}.zookeeper.chroot", f"{chroot!r} must look like /kafka (leading slash, no trailing slash)")
        zk = ZooKeeperSettings(
            conn_id=f.string(zraw["conn_id"], f"{where}.zookeeper.conn_id", CONN_ID_RE, "connection id"),
            chroot=chroot,
            runbook_conn_id=(None if zraw.get("runbook_conn_id") is None else f.string(
                zraw["runbook_conn_id"], f"{where}.zookeeper.runbook_conn_id", CONN_ID_RE, "connection id")),
        )

    parts = f.integer(raw.get("offsets_topic_partitions", DEFAULT_OFFSETS_TOPIC_PARTITIONS),
                      f"{where}.offsets_topic_partitions", 1, 10000)

    cleaner = CleanerSettings()
    if raw.get("cleaner") is not None:
        craw = f.mapping(raw["cleaner"], f"{where}.cleaner")
        f.unknown(craw, {"dedupe_buffer_size", "threads", "io_buffer_load_factor"}, f"{where}.cleaner")
        cleaner = CleanerSettings(
            dedupe_buffer_size=f.integer(craw.get("dedupe_buffer_size", DEFAULT_DEDUPE_BUFFER_SIZE),
                                         f"{where}.cleaner.dedupe_buffer_size", 1),
            threads=f.integer(craw.get("threads", DEFAULT_CLEANER_THREADS), f"{where}.cleaner.threads", 1, 1024),
            io_buffer_load_factor=f.number(craw.get("io_buffer_load_factor", DEFAULT_LOAD_FACTOR),
                                           f"{where}.cleaner.io_buffer_load_factor", 0.0, 1.0),
        )

    brokers = []
    raw_brokers = raw.get("brokers") or []
    if not isinstance(raw_brokers, list):
        raise f.fail(f"{where}.brokers", "expected a list")
    seen_ids: set[int] = set()
    for i, braw in enumerate(raw_brokers):
        bwhere = f"{where}.brokers[{i}]"
        braw = f.mapping(braw, bwhere)
        f.unknown(braw, {"id", "log_dirs", "access", "ssh_conn_id"}, bwhere)
        if "id" not in braw:
            raise f.fail(bwhere, "missing required field 'id'")
        bid = f.integer(braw["id"], f"{bwhere}.id", 0)
        if bid in seen_ids:
            raise f.fail(f"{bwhere}.id", f"broker id {bid} appears twice")
        seen_ids.add(bid)
        access = braw.get("access", "local")
        if access not in ("local", "ssh"):
            raise f.fail(f"{bwhere}.access", f"must be 'local' or 'ssh', got {access!r}")
        ssh_conn_id = braw.get("ssh_conn_id")
        if access == "ssh":
            ssh_conn_id = f.string(ssh_conn_id, f"{bwhere}.ssh_conn_id", CONN_ID_RE, "connection id")
        log_dirs = f.strings(braw.get("log_dirs"), f"{bwhere}.log_dirs")
        log_dirs = tuple(_log_dir(f, d, f"{bwhere}.log_dirs[{j}]", access, base_dir) for j, d in enumerate(log_dirs))
        if len(set(log_dirs)) != len(log_dirs):
            raise f.fail(f"{bwhere}.log_dirs", f"a log dir appears twice in {list(log_dirs)}")
        brokers.append(Broker(id=bid, log_dirs=log_dirs, access=access, ssh_conn_id=ssh_conn_id))

    gim = None
    if raw.get("group_id_mappings") is not None:
        gim = _parse_group_id_mappings(f, raw["group_id_mappings"], f"{where}.group_id_mappings", zk)

    control = None
    if raw.get("broker_control") is not None:
        control = _parse_broker_control(f, raw["broker_control"], f"{where}.broker_control", base_dir)

    stores = _parse_offset_stores(f, raw.get("offset_stores"), f"{where}.offset_stores", zk)

    return Cluster(
        name=name,
        kafka_conn_id=kafka_conn_id,
        kafka_version=kafka_version,
        zookeeper=zk,
        offsets_topic_partitions=parts,
        groups=f.strings(raw.get("groups"), f"{where}.groups"),
        approvers=f.strings(raw.get("approvers"), f"{where}.approvers"),
        cleaner=cleaner,
        brokers=tuple(brokers),
        group_id_mappings=gim,
        broker_control=control,
        offset_stores=stores,
        fleet_file=f.path,
        runbook_kafka_conn_id=runbook_kafka_conn_id,
    )


MIN_LOG_DIR_DEPTH = 2


def _log_dir(f: _Field, d: str, where: str, access: str, base_dir: Path) -> str:
    """A broker log dir as an absolute path, at least MIN_LOG_DIR_DEPTH folders below /.

    The trim moves segment files out of <log dir>/__consumer_offsets-N/: a log dir written as
    `/`, `/data` or a bare `data` resolved next to a fleet file in / would point it at a
    system-wide folder, so those are refused. Local relative paths resolve against the fleet file's
    folder; ssh log dirs are paths on the broker host, so they must be absolute and plain (no
    `.` or `..`). No control characters (they end up in rendered shell runbooks)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in d):
        raise f.fail(where, f"{d!r} holds a control character")
    if access == "local":
        path = d if os.path.isabs(d) else str((base_dir / d).resolve())
        path = os.path.normpath(path)
    else:
        if not d.startswith("/"):
            raise f.fail(where, f"{d!r} must be absolute: it is a path on the broker host (access: ssh)")
        if any(part in (".", "..") for part in d.split("/")):
            raise f.fail(where, f"{d!r} must not hold . or .. components (a path on the broker host)")
        path = os.path.normpath(d)
    depth = len([p for p in path.split("/") if p])
    if depth < MIN_LOG_DIR_DEPTH:
        shown = repr(d) if d == path else f"{d!r} (resolves to {path!r})"
        raise f.fail(where, f"{shown} is too close to / for a broker log dir: the trim moves segment files out of "
                            f"it; give the full path, at least {MIN_LOG_DIR_DEPTH} folders deep, e.g. "
                            "/var/lib/kafka/data")
    return path


def _parse_broker_control(f: _Field, raw: Any, where: str, base_dir: Path) -> BrokerControlSettings:
    raw = f.mapping(raw, where)
    f.unknown(raw, set(BROKER_CONTROL_COMMANDS) | {"timeout"}, where)
    commands: dict[str, tuple[str, ...] | None] = {}
    for command, allowed in BROKER_CONTROL_COMMANDS.items():
        cwhere = f"{where}.{command}"
        if raw.get(command) is None:
            if command != "set_config":
                raise f.fail(where, f"missing required field {command!r}")
            commands[command] = None
            continue
        argv = f.strings(raw[command], cwhere)
        if not argv:
            raise f.fail(cwhere, "expected a non-empty list of strings (argv: the program first)")
        used: set[str] = set()
        for i, element in enumerate(argv):
            try:
                names = argv_placeholders(element)
            except ValueError as e:
                raise f.fail(f"{cwhere}[{i}]", str(e)) from None
            unknown = sorted(set(names) - set(allowed))
            if unknown:
                raise f.fail(f"{cwhere}[{i}]", f"unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)} "
                                               f"(allowed here: {', '.join('{' + n + '}' for n in allowed)})")
            if i == 0 and names:
                raise f.fail(f"{cwhere}[0]", f"the program {element!r} must not hold placeholders")
            used.update(names)
        missing = [n for n in allowed if n not in used]
        if missing:
            raise f.fail(cwhere, f"must pass {', '.join('{' + n + '}' for n in missing)} in one of its elements")
        commands[command] = argv
    try:
        timeout = parse_duration_seconds(raw.get("timeout", DEFAULT_BROKER_CONTROL_TIMEOUT_SECONDS))
    except ValueError as e:
        raise f.fail(f"{where}.timeout", str(e)) from None
    if timeout <= 0:
        raise f.fail(f"{where}.timeout", f"must be > 0, got {timeout}")
    return BrokerControlSettings(stop=commands["stop"], start=commands["start"], set_config=commands["set_config"],
                                 cwd=str(base_dir), timeout_seconds=timeout)


def _znode_path(f: _Field, value: Any, where: str, example: str) -> str:
    path = f.string(value, where)
    if not path.startswith("/") or path == "/" or path.endswith("/") or "//" in path:
        raise f.fail(where, f"{path!r} must look like {example} (leading slash, no trailing slash)")
    if any(part in (".", "..") for part in path.split("/")[1:]):
        raise f.fail(where, f"{path!r} must not hold . or .. components")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise f.fail(where, f"{path!r} holds a control character")
    return path


def _parse_offset_stores(f: _Field, raw: Any, where: str,
                         zk: ZooKeeperSettings | None = None) -> tuple[OffsetStoreSettings, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise f.fail(where, f"expected a list of stores, got {type(raw).__name__}")
    stores = []
    for i, sraw in enumerate(raw):
        swhere = f"{where}[{i}]"
        sraw = f.mapping(sraw, swhere)
        f.unknown(sraw, {"kind", "conn_id", "runbook_conn_id", "chroot", "root", "groups", "spouts", "storm_root"},
                  swhere)
        for required in ("kind", "conn_id"):
            if required not in sraw:
                raise f.fail(swhere, f"missing required field {required!r}")
        kind = sraw["kind"]
        if kind not in OFFSET_STORE_KINDS:
            raise f.fail(f"{swhere}.kind", f"must be one of {', '.join(OFFSET_STORE_KINDS)}, got {kind!r}")
        conn_id = f.string(sraw["conn_id"], f"{swhere}.conn_id", CONN_ID_RE, "connection id")
        runbook_conn_id = None
        if sraw.get("runbook_conn_id") is not None:
            runbook_conn_id = f.string(sraw["runbook_conn_id"], f"{swhere}.runbook_conn_id", CONN_ID_RE,
                                       "connection id")
        elif zk is not None and conn_id == zk.conn_id:
            runbook_conn_id = zk.runbook_conn_id  # the cluster's own ZooKeeper: its runbook identity
        chroot = ""
        if sraw.get("chroot"):
            chroot = _znode_path(f, sraw["chroot"], f"{swhere}.chroot", "/kafka")
        if kind == "storm" and "root" not in sraw:
            raise f.fail(swhere, "missing required field 'root' (the spouts' zkRoot, e.g. /kafka-spouts)")
        root = _znode_path(f, sraw.get("root", DEFAULT_CONSUMERS_ROOT), f"{swhere}.root", "/consumers")
        if kind == "zookeeper" and sraw.get("spouts") is not None:
            raise f.fail(f"{swhere}.spouts", "only a storm store has spouts (use groups for kind zookeeper)")
        if kind == "zookeeper" and sraw.get("storm_root") is not None:
            raise f.fail(f"{swhere}.storm_root", "only a storm store has Storm's root")
        storm_root = _znode_path(f, sraw.get("storm_root", DEFAULT_STORM_ROOT), f"{swhere}.storm_root", "/storm")
        if kind == "storm" and sraw.get("groups") is not None:
            raise f.fail(f"{swhere}.groups", "a storm store names spout ids: use spouts")
        groups = f.strings(sraw.get("groups"), f"{swhere}.groups")
        spouts = f.strings(sraw.get("spouts"), f"{swhere}.spouts")
        for field_name, names in (("groups", groups), ("spouts", spouts)):
            for j, n in enumerate(names):
                if "/" in n or n in (".", ".."):
                    raise f.fail(f"{swhere}.{field_name}[{j}]", f"{n!r} cannot be a znode name (holds / or is . or ..)")
        key = (kind, conn_id, chroot, root)
        if any((s.kind, s.conn_id, s.chroot, s.root) == key for s in stores):
            raise f.fail(swhere, f"the {kind} store {conn_id}{chroot}{root} appears twice")
        stores.append(OffsetStoreSettings(kind=kind, conn_id=conn_id, root=root, chroot=chroot,
                                          groups=groups, spouts=spouts, runbook_conn_id=runbook_conn_id,
                                          storm_root=storm_root))
    return tuple(stores)


def _parse_group_id_mappings(f: _Field, raw: Any, where: str, zk: ZooKeeperSettings | None) -> GroupIdMappingSettings:
    if raw is True:
        raw = {}
    raw = f.mapping(raw, where)
    f.unknown(raw, {"root", "create_missing_unattended", "grace"}, where)
    if zk is None:
        raise f.fail(where, "needs the cluster's zookeeper section (the mappings live in its ZooKeeper)")
    root = raw.get("root", DEFAULT_GROUP_ID_ROOT)
    root = f.string(root, f"{where}.root")
    if not root.startswith("/") or (root != "/" and root.endswith("/")) or "//" in root or root == "/":
        raise f.fail(f"{where}.root", f"{root!r} must look like /client_group_id (leading slash, no trailing slash)")
    if any(part in (".", "..") for part in root.split("/")[1:]):
        raise f.fail(f"{where}.root", f"{root!r} must not hold . or .. components")
    unattended = raw.get("create_missing_unattended", True)
    if not isinstance(unattended, bool):
        raise f.fail(f"{where}.create_missing_unattended", f"expected true or false, got {unattended!r}")
    try:
        grace = parse_duration_seconds(raw.get("grace", "1h"))
    except ValueError as e:
        raise f.fail(f"{where}.grace", str(e)) from None
    if grace < 0:
        raise f.fail(f"{where}.grace", f"must be >= 0, got {grace}")
    return GroupIdMappingSettings(root=root, create_missing_unattended=unattended, grace_seconds=grace)


def parse_fleet(text: str, path: str = "<fleet>", base_dir: Path | None = None) -> Fleet:
    f = _Field(path)
    import yaml  # here, not at import time: Spark executors import this module without PyYAML
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise FleetConfigError(f"{path}: not valid YAML: {e}") from None
    doc = f.mapping(doc, "top level")
    f.unknown(doc, {"version", "clusters", "alerts"}, "top level")
    version = doc.get("version", 1)
    if version != 1:
        raise f.fail("version", f"unsupported fleet file version {version!r} (this toolkit reads version 1)")
    raw_clusters = doc.get("clusters")
    if not isinstance(raw_clusters, list) or not raw_clusters:
        raise f.fail("clusters", "expected a non-empty list of clusters")
    base_dir = base_dir or Path(path).resolve().parent
    clusters = []
    names: set[str] = set()
    for i, raw in enumerate(raw_clusters):
        c = _parse_cluster(f, raw, f"clusters[{i}]", base_dir)
        if c.name in names:
            raise f.fail(f"clusters[{i}].name", f"cluster name {c.name!r} appears twice")
        names.add(c.name)
        clusters.append(c)
    alerts = AlertSettings()
    if doc.get("alerts") is not None:
        alerts = _parse_alerts(f, doc["alerts"])
    return Fleet(path=path, clusters=tuple(clusters), alerts=alerts)


def _parse_alerts(f: _Field, raw: Any) -> AlertSettings:
    araw = f.mapping(raw, "alerts")
    f.unknown(araw, {"smtp_conn_id", "to", "subject_prefix", "slack_webhook_conn_id", "pagerduty_conn_id",
                     "pagerduty_severity", "approval_channels"}, "alerts")
    conn_ids = {}
    for key in ("smtp_conn_id", "slack_webhook_conn_id", "pagerduty_conn_id"):
        value = araw.get(key)
        if value is not None:
            if isinstance(value, str) and "://" in value:
                # a webhook URL or a key pasted here would be a secret in a file many people read
                raise f.fail(f"alerts.{key}", "expected the id of an Airflow connection, got a URL: put the "
                                              "URL in the connection's password, never in the fleet file")
            value = f.string(value, f"alerts.{key}", CONN_ID_RE, "connection id")
        conn_ids[key] = value
    smtp = conn_ids["smtp_conn_id"]
    to = f.strings(araw.get("to"), "alerts.to")
    if smtp and not to:
        raise f.fail("alerts.to", "an smtp_conn_id needs at least one recipient")
    for i, addr in enumerate(to):
        if "@" not in addr or any(c in addr for c in " \r\n,;"):
            raise f.fail(f"alerts.to[{i}]", f"{addr!r} is not an e-mail address")
    severity = araw.get("pagerduty_severity", "warning")
    if severity not in PAGERDUTY_SEVERITIES:
        raise f.fail("alerts.pagerduty_severity", f"expected one of {', '.join(PAGERDUTY_SEVERITIES)}, got {severity!r}")
    prefix = str(araw.get("subject_prefix", "[kafka-fleet]"))
    settings = AlertSettings(smtp_conn_id=smtp, to=to, subject_prefix=prefix,
                             slack_webhook_conn_id=conn_ids["slack_webhook_conn_id"],
                             pagerduty_conn_id=conn_ids["pagerduty_conn_id"], pagerduty_severity=severity)
    if "approval_channels" not in araw:
        return settings
    if araw["approval_channels"] is None:
        raise f.fail("alerts.approval_channels", "expected a list of channels ([] for none), got null")
    chosen = f.strings(araw["approval_channels"], "alerts.approval_channels")
    for i, channel in enumerate(chosen):
        if channel not in ALERT_CHANNELS:
            raise f.fail(f"alerts.approval_channels[{i}]",
                         f"unknown channel {channel!r} (channels: {', '.join(ALERT_CHANNELS)})")
        if channel not in settings.channels:
            key = {"smtp": "smtp_conn_id", "slack": "slack_webhook_conn_id", "pagerduty": "pagerduty_conn_id"}[channel]
            raise f.fail(f"alerts.approval_channels[{i}]", f"{channel!r} is not configured (set alerts.{key})")
        if channel in chosen[:i]:
            raise f.fail(f"alerts.approval_channels[{i}]", f"{channel!r} appears twice")
    return dataclasses.replace(settings, approval_channels=chosen)


def load_fleet(path: str | os.PathLike) -> Fleet:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FleetConfigError(f"fleet file {str(p)!r} does not exist") from None
    except OSError as e:
        raise FleetConfigError(f"fleet file {str(p)!r} cannot be read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        line = e.object[:e.start].count(b"\n") + 1
        raise FleetConfigError(f"fleet file {str(p)!r} is not UTF-8: byte 0x{e.object[e.start]:02x} at line {line} "
                               f"(offset {e.start}); save the file as UTF-8") from None
    return parse_fleet(text, path=str(p), base_dir=p.resolve().parent)
