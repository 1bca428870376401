"""The toolkit's datasets (design.md): schemas, layout and atomic writes; the data root they live in.

Layout under a data root (a local folder or an object store URI, e.g. s3://bucket/x):

    <root>/<dataset>/cluster=<cluster>/date=<YYYY-MM-DD>/part-<time>-<id>.parquet

Every row also carries `cluster` and `observed_at` (UTC), so readers that look files up
recursively (Spark's recursiveFileLookup) lose nothing. A collection's files are first written
under names starting with `_tmp-` (ignored by every reader: Spark and the jobs skip files whose
names start with _ or .) and renamed into place only when every dataset of the collection was
written, so a failed collection leaves no partial rows.

`DataRoot` is the one way to the data root, local or not: every dataset, report, plan and chart is
read and written through it (`DataRoot(uri) / "reports" / ...` is a `DataPath`, as pathlib's Path
for a local folder). An object store root (s3://) is reached with the `ObjectStoreOptions` the
adapter installs (`install_object_store`: the endpoint, region and keys of the deployment's
connection), never with keys in a path, an argument or a message. See DataRoot for the rule of
atomic publishing that holds on both.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from fleetkit.core.errors import FleetError

log = logging.getLogger(__name__)

TS = pa.timestamp("us", tz="UTC")

# The one declaration of every dataset's columns (order, types, nullability): the Spark jobs derive
# their StructTypes from it (spark_jobs/jobs_common.py: spark_schema(name)).
SCHEMAS: dict[str, pa.Schema] = {
    "offsets_snapshots": pa.schema([
        ("cluster", pa.string()), ("group", pa.string()), ("topic", pa.string()),
        ("partition", pa.int32()), ("observed_at", TS),
        ("committed_offset", pa.int64()), ("log_start_offset", pa.int64()),
        ("log_end_offset", pa.int64()), ("group_state", pa.string()),
        ("assigned", pa.bool_()), ("member_client_id", pa.string()), ("member_host", pa.string()),
        # classic / consumer (KIP-848); null where the cluster did not say, and in files written before
        ("group_type", pa.string()),
        # where the offset is kept: kafka | zookeeper (old high-level consumer) | storm (storm-kafka
        # spout; `group` is the spout id, member_client_id the topology name); null in files written
        # before the column existed, which means kafka
        ("source", pa.string()),
        # KIP-848 groups: the epoch of the member holding the partition (below the group epoch while
        # it reconciles); null for classic groups, memberless partitions and older files
        ("member_epoch", pa.int32()),
        # from __consumer_offsets (collection.offsets_topic.fold_commit_times): when the committed
        # offset took its current value (the commit time of that change; re-commits of the same
        # offset do not move it) and the partition's typical seconds between offset changes; null
        # where unknown (ZooKeeper and Storm stores, a commit log not read up to it yet, older files)
        ("committed_at", TS), ("commit_interval_seconds", pa.float64()),
        # the timestamp of the record at the committed offset (collection.groups.add_record_timestamps,
        # 0.10+, a bounded number of reads per collection); null where not read or caught up
        ("committed_record_timestamp", TS),
        # classic groups, from the group-metadata records of __consumer_offsets (collection.rebalances):
        # the group's generation, its cumulative count of members that left and came back, the cause
        # of the latest such rejoin (poll_interval | restart | session) and the assignor it uses; null
        # where unknown (ZooKeeper and Storm stores, older files). KIP-848 groups, from
        # ConsumerGroupDescribe (collection.rebalances.consumer_group_counters): generation is the
        # group epoch, rejoins a departures counter ((group epoch - members) // 2), rejoin_cause null
        # and assignor `consumer:` + the server assignor
        ("generation", pa.int32()), ("rejoins", pa.int32()), ("rejoin_cause", pa.string()),
        ("assignor", pa.string()),
        # the member holding the partition (its member id, kafka-lag-exporter's `consumer_id`); null
        # where no live member holds it, for ZooKeeper and Storm stores and in older files
        ("member_id", pa.string()),
    ]),
    "partition_state": pa.schema([
        ("cluster", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
        ("observed_at", TS), ("leader", pa.int32()), ("isr", pa.list_(pa.int32())),
        ("leader_epoch", pa.int32()), ("controller_epoch", pa.int32()), ("source", pa.string()),
    ]),
    "offsets_topic_records": pa.schema([
        ("cluster", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("observed_at", TS),
        ("key_version", pa.int16()), ("group", pa.string()), ("topic", pa.string()),
        ("topic_partition", pa.int32()), ("value_version", pa.int16()), ("committed_offset", pa.int64()),
        ("leader_epoch", pa.int32()), ("metadata", pa.string()), ("commit_timestamp", pa.int64()),
        ("expire_timestamp", pa.int64()), ("tombstone", pa.bool_()), ("size_bytes", pa.int32()),
        ("generation", pa.int32()), ("protocol_type", pa.string()), ("protocol", pa.string()),
        ("leader", pa.string()),
        ("members", pa.list_(pa.struct([("client_id", pa.string()), ("client_host", pa.string()),
                                        ("member_id", pa.string())]))),
    ]),
    "segment_inventory": pa.schema([
        ("cluster", pa.string()), ("broker", pa.int32()), ("log_dir", pa.string()), ("topic", pa.string()),
        ("partition", pa.int32()), ("observed_at", TS), ("base_offset", pa.int64()), ("size_bytes", pa.int64()),
        ("modified_at", TS), ("is_active", pa.bool_()),
    ]),
    "cleaner_checkpoints": pa.schema([
        ("cluster", pa.string()), ("broker", pa.int32()), ("log_dir", pa.string()), ("topic", pa.string()),
        ("partition", pa.int32()), ("observed_at", TS), ("checkpoint_offset", pa.int64()),
    ]),
    "audit": pa.schema([
        ("cluster", pa.string()), ("observed_at", TS), ("record_id", pa.string()),
        ("dag_id", pa.string()), ("run_id", pa.string()), ("action", pa.string()),
        ("event", pa.string()), ("actor", pa.string()), ("digest", pa.string()),
        ("message", pa.string()), ("details", pa.string()),
        # the cluster's hash chain (core/audit.py); null in records written before the chain existed
        ("prev_hash", pa.string()), ("hash", pa.string()),
        # the audit key that signed `hash` (HMAC); null in records chained before the key
        ("key_id", pa.string()),
    ]),
    "leader_changes": pa.schema([  # seen by the leader-change watch as they happened
        ("cluster", pa.string()), ("partition", pa.int32()), ("observed_at", TS),
        ("from_leader", pa.int32()), ("to_leader", pa.int32()), ("from_epoch", pa.int32()),
        ("to_epoch", pa.int32()), ("isr", pa.list_(pa.int32())), ("source", pa.string()),
    ]),
    "group_coordinators": pa.schema([
        ("cluster", pa.string()), ("group", pa.string()), ("observed_at", TS),
        ("coordinator_id", pa.int32()), ("error", pa.string()), ("state", pa.string()),
        ("members", pa.int32()),
    ]),
    # KoP-style client-to-group mapping znodes (<root>/<ip>-<clientId> = group id), fleetkit.group_ids
    "group_id_mappings": pa.schema([
        ("cluster", pa.string()), ("observed_at", TS), ("path", pa.string()), ("client_host", pa.string()),
        ("client_id", pa.string()), ("group", pa.string()), ("znode_version", pa.int32()),
        ("ctime", TS), ("mtime", TS),
    ]),
    # live members of every group the cluster lists (the truth the mappings are reconciled against);
    # a row with member_id, client_id and client_host null: the group could not be described
    "group_members": pa.schema([
        ("cluster", pa.string()), ("observed_at", TS), ("group", pa.string()), ("client_id", pa.string()),
        ("client_host", pa.string()), ("member_id", pa.string()),
    ]),
}

#: the findings jobs write beside the datasets (JSON Lines), declared like the datasets: the
#: group-id reconciliation's (rules.diff's keys, one column each, plus the cluster)
FINDINGS: dict[str, pa.Schema] = {
    "group_id_findings": pa.schema([
        ("cluster", pa.string()), ("path", pa.string()), ("class", pa.string()), ("reason", pa.string()),
        ("group", pa.string()), ("groups", pa.list_(pa.string())), ("client_host", pa.string()),
        ("client_id", pa.string()), ("member_ids", pa.list_(pa.string())), ("znode_group", pa.string()),
        ("znode_version", pa.int32()), ("ctime_ms", pa.int64()), ("mtime", TS), ("age_seconds", pa.float64()),
    ]),
    # the stuck job's (fleetkit.stuck.stages): one row per partition of a group in an offsets store,
    # also appended as a dataset under the data root
    "stuck_findings": pa.schema([
        ("cluster", pa.string()), ("topic", pa.string()), ("partition", pa.int32()), ("source", pa.string()),
        ("group", pa.string()), ("status", pa.string()), ("lag", pa.int64()), ("committed_offset", pa.int64()),
        ("log_start_offset", pa.int64()), ("log_end_offset", pa.int64()), ("assigned", pa.bool_()),
        ("window_start", TS), ("window_end", TS), ("snapshots", pa.int64()), ("reason", pa.string()),
        ("unchanged_since", TS), ("confidence", pa.string()), ("stalled_since", TS), ("stopped_since", TS),
        ("judged_from", TS), ("offset_expires_at", TS), ("expires_in_seconds", pa.int64()),
        ("lag_seconds", pa.float64()), ("lag_seconds_kind", pa.string()), ("lag_seconds_error", pa.float64()),
    ]),
    # one row per group: its findings rolled up and its rebalance-storm verdict
    "stuck_groups": pa.schema([
        ("cluster", pa.string()), ("source", pa.string()), ("group", pa.string()), ("status", pa.string()),
        ("total_lag", pa.int64()), ("counts", pa.map_(pa.string(), pa.int64())), ("judged_from", TS),
        ("rebalance_storm", pa.bool_()), ("storm_kind", pa.string()), ("rebalances", pa.int32()),
        ("rejoins", pa.int32()), ("group_wide_stop", pa.bool_()), ("storm_fix", pa.string()),
    ]),
    # the trim_health job's (fleetkit.trim.stages): one row per __consumer_offsets replica
    "offsets_health": pa.schema([
        ("cluster", pa.string()), ("broker", pa.int32()), ("log_dir", pa.string()), ("partition", pa.int32()),
        ("records", pa.int64()), ("live_keys", pa.int64()), ("tombstones", pa.int64()),
        ("record_bytes", pa.int64()), ("live_bytes", pa.int64()), ("disk_bytes", pa.int64()),
        ("segments", pa.int64()), ("duplicate_ratio", pa.float64()), ("largest_segment_messages", pa.int64()),
        ("keys_per_pass", pa.int64()), ("checkpoint_first", pa.int64()), ("checkpoint_last", pa.int64()),
        ("dirty_bytes_first", pa.int64()), ("dirty_bytes_last", pa.int64()), ("verdict", pa.string()),
        ("reason", pa.string()), ("fix", pa.string()),
    ]),
    # and one per segment of those replicas, with the messages it holds
    "offsets_segments": pa.schema([
        ("cluster", pa.string()), ("broker", pa.int32()), ("log_dir", pa.string()), ("partition", pa.int32()),
        ("base_offset", pa.int64()), ("next_base", pa.int64()), ("size_bytes", pa.int64()),
        ("is_active", pa.bool_()), ("messages", pa.int64()),
    ]),
    # the coordinator-ownership job's: one row per group (its coordinator over the window) ...
    "ownership_groups": pa.schema([
        ("cluster", pa.string()), ("group", pa.string()), ("partition", pa.int32()), ("verdict", pa.string()),
        ("observed_at", TS), ("expected_coordinator", pa.int32()), ("coordinator_id", pa.int32()),
        ("error", pa.string()), ("state", pa.string()), ("members", pa.int32()), ("leader_epoch", pa.int32()),
        ("not_ok_since", TS), ("not_ok_seconds", pa.int64()), ("last_ok_at", TS), ("last_bad_at", TS),
        ("ok_again_at", TS), ("observations", pa.int64()), ("not_ok_observations", pa.int64()),
    ]),
    # ... and one per __consumer_offsets partition (its leader changes and its groups' states)
    "ownership_partitions": pa.schema([
        ("cluster", pa.string()), ("partition", pa.int32()), ("verdict", pa.string()), ("leader", pa.int32()),
        ("isr", pa.list_(pa.int32())), ("leader_epoch", pa.int32()), ("observed_at", TS),
        ("changes_in_window", pa.int32()),
        ("changes", pa.list_(pa.struct([("at", TS), ("from_leader", pa.int32()), ("to_leader", pa.int32()),
                                        ("from_epoch", pa.int32()), ("to_epoch", pa.int32()),
                                        ("isr", pa.list_(pa.int32()))]))),
        ("last_change_at", TS), ("groups", pa.int64()), ("ok", pa.int64()), ("mismatch", pa.int64()),
        ("loading", pa.int64()), ("unavailable", pa.int64()), ("affected_groups", pa.list_(pa.string())),
        ("not_ok_since", TS), ("not_ok_seconds", pa.int64()), ("recovered_at", TS), ("recovery_seconds", pa.int64()),
        ("size_bytes", pa.int64()), ("records", pa.int64()), ("health", pa.string()),
    ]),
    # lag over the window of the flagged partitions the report charts
    "stuck_series": pa.schema([
        ("cluster", pa.string()), ("source", pa.string()), ("group", pa.string()), ("topic", pa.string()),
        ("partition", pa.int32()), ("status", pa.string()),
        ("points", pa.list_(pa.struct([("t", pa.string()), ("lag", pa.int64()), ("committed_offset", pa.int64()),
                                       ("log_end_offset", pa.int64())]))),
    ]),
}



def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def iso_z(ts: dt.datetime | None) -> str | None:
    """ISO-8601 UTC with a trailing Z (the toolkit's JSON timestamp format)."""
    if ts is None:
        return None
    return ts.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


class DataRootError(FleetError):
    """The data root cannot be reached or used: one line naming its URI (never a key) and where its
    credentials come from (the connection id)."""


# -- the object store: options installed by the adapter ------------------------------------------------
@dataclass(frozen=True)
class ObjectStoreOptions:
    """How to reach an S3-compatible object store: endpoint (None: AWS itself), region and keys (None:
    the AWS SDK's own chain: its environment variables, the instance's role...). `source` names where
    they came from in errors ("connection 'fleet_data_root'"); the keys are never shown (repr hides them)."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    source: str = "the AWS SDK's default credentials"

    #: the environment a job's process (the in-process engines, spark-submit) gets the store through:
    #: the AWS SDKs' own variable names, read by pyarrow, boto and Hadoop's s3a alike
    ENV = {"access_key_id": "AWS_ACCESS_KEY_ID", "secret_access_key": "AWS_SECRET_ACCESS_KEY",
           "endpoint_url": "AWS_ENDPOINT_URL", "region": "AWS_REGION"}
    SOURCE_ENV = "FLEET_DATA_ROOT_STORE"

    def child_env(self) -> dict[str, str]:
        """Environment variables that hand these options to a job's process (never its argv)."""
        out = {var: getattr(self, name) for name, var in self.ENV.items() if getattr(self, name)}
        out[self.SOURCE_ENV] = self.source
        if self.endpoint_url:
            out.update(_COMPAT_ENV)
        return out

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ObjectStoreOptions":
        env = os.environ if environ is None else environ
        return cls(**{name: env.get(var) or None for name, var in cls.ENV.items()},
                   source=env.get(cls.SOURCE_ENV) or "the environment (AWS_* variables)")

    def key(self) -> tuple:
        import hashlib

        secret = hashlib.sha256((self.secret_access_key or "").encode()).hexdigest()
        return (self.endpoint_url, self.region, self.access_key_id, secret)

    def redact(self, text: str) -> str:
        for value in (self.secret_access_key, self.access_key_id):
            if value and len(value) >= 8:
                text = text.replace(value, "***")
        return text


#: an S3-compatible server that is not AWS (s3proxy, MinIO, Ceph) may not take the trailing
#: checksums newer AWS SDKs send by default: ask for checksums only where the API requires them
_COMPAT_ENV = {"AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED", "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED"}

_installed: ObjectStoreOptions | Callable[[], ObjectStoreOptions | None] | None = None
_filesystems: dict[tuple, pafs.FileSystem] = {}
_checked: dict[tuple, float] = {}
_fs_lock = threading.Lock()


def install_object_store(options: ObjectStoreOptions | Callable[[], ObjectStoreOptions | None] | None) -> None:
    """Install how object store roots are reached in this process: options, or a function that
    returns them when first needed (the Airflow adapter's: the connection FLEET_DATA_ROOT_CONN_ID
    names). None: back to the environment (a job's process, started with ObjectStoreOptions.child_env)."""
    global _installed
    with _fs_lock:
        _installed = options
        _filesystems.clear()
        _checked.clear()


def object_store_options() -> ObjectStoreOptions:
    """The options installed (a resolver is asked once and its answer kept), else those of the environment."""
    global _installed
    found = _installed
    if callable(found):
        found = found()
        with _fs_lock:
            _installed = found
    return found if isinstance(found, ObjectStoreOptions) else ObjectStoreOptions.from_env()


def _s3_filesystem(options: ObjectStoreOptions) -> pafs.FileSystem:
    with _fs_lock:
        fs = _filesystems.get(options.key())
        if fs is not None:
            return fs
        kwargs: dict = {"connect_timeout": 5, "request_timeout": 30,
                        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3)}
        # no region: the SDK's own (its variables, configuration, the instance); a server that is not
        # AWS signs with the one it is given, us-east-1 when none
        region = options.region or ("us-east-1" if options.endpoint_url else None)
        if region:
            kwargs["region"] = region
        if options.access_key_id and options.secret_access_key:
            kwargs.update(access_key=options.access_key_id, secret_key=options.secret_access_key)
        if options.endpoint_url:
            import urllib.parse

            u = urllib.parse.urlsplit(options.endpoint_url if "://" in options.endpoint_url
                                      else "https://" + options.endpoint_url)
            kwargs.update(endpoint_override=u.netloc, scheme=u.scheme or "https")
            for k, v in _COMPAT_ENV.items():
                os.environ.setdefault(k, v)  # read by the SDK's client, made below
        fs = _filesystems[options.key()] = pafs.S3FileSystem(**kwargs)
        return fs


def _is_store_error(e: BaseException) -> bool:
    return isinstance(e, OSError) and not isinstance(e, FileNotFoundError) and "AWS Error" in str(e)


def _reason(e: BaseException) -> str:
    text = str(e)
    if "ACCESS_DENIED" in text or "SIGNATURE" in text.upper() or "INVALID_ACCESS_KEY" in text:
        return "access denied (a wrong access key or secret, or no permission on the bucket)"
    if "NETWORK_CONNECTION" in text or "Could not connect" in text or "curlCode" in text:
        return "the object store does not answer (cannot connect)"
    return " ".join(text.split())[:200]


def _mtime_ns(info: pafs.FileInfo) -> int:
    try:
        return info.mtime_ns or 0
    except (TypeError, ValueError):
        return 0


# -- the data root and paths in it ----------------------------------------------------------------------
class DataRoot:
    """A data root folder or URI, with the filesystem that serves it.

    The rule of atomic publishing (a reader never takes a half-written file as complete), on a local
    folder and on an object store alike:

    * One file is published whole: on a local folder it is written beside its name (`.tmp-*`) and
      renamed over it; on an object store, which has no rename, its whole content is built first and
      sent as one object (one PUT, or a multipart upload completed only at the end: an upload that
      fails or is killed leaves no object). A stream that other code writes into is never opened at
      a final name (pyarrow completes an upload when such a stream is closed, also by an exception):
      such files (Parquet) are written under a `_tmp-` name and copied into place whole.
    * Readers skip names starting with `_` or `.` (`_tmp-` objects an interrupted writer left).
    * A result of several files (a job's run folder) is complete when its `_SUCCESS` marker, written
      last, exists: readers that choose a run (`newest_in_runs`) take only marked runs on an object
      store (a local run folder is taken as before).
    * What must be appended durably or be unique (the execution journal, the locks, the audit chain's
      heads) does not live on an object store (docs/deploy.md).
    """

    def __init__(self, root: str | os.PathLike, options: ObjectStoreOptions | None = None):
        root = str(root)
        self.options: ObjectStoreOptions | None = None
        if root.startswith("file://"):
            root = root[len("file://"):]
        if root.startswith(("s3://", "s3a://")):
            self.options = options or object_store_options()
            self.fs = _s3_filesystem(self.options)
            self.path = root.split("://", 1)[1].strip("/")
            self.scheme = "s3"
            self.uri = f"s3://{self.path}"
            self.check()
        elif "://" in root:
            self.fs, self.path = pafs.FileSystem.from_uri(root)
            self.scheme = root.split("://", 1)[0]
            self.uri = root
        else:
            self.fs, self.path = pafs.LocalFileSystem(), os.path.abspath(root)
            self.scheme = ""
            self.uri = self.path

    @property
    def local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def __repr__(self) -> str:
        return f"DataRoot({self.uri!r})"

    def describe(self) -> str:
        """The root for a message: its URI, and for an object store where its credentials come from."""
        if self.options is None:
            return self.uri
        where = f" at {self.options.endpoint_url}" if self.options.endpoint_url else ""
        return f"{self.uri} (object store{where}, credentials from {self.options.source})"

    def error(self, e: BaseException, doing: str = "") -> DataRootError:
        what = f" ({doing})" if doing else ""
        reason = self.options.redact(_reason(e)) if self.options else _reason(e)
        return DataRootError(f"data root {self.describe()} cannot be used{what}: {reason}")

    def check(self) -> None:
        """For an object store: its bucket answers with these credentials (DataRootError, one line,
        otherwise). A success is remembered for a few seconds per bucket."""
        import time

        if self.options is None:
            return
        bucket = self.path.split("/", 1)[0]
        key = (*self.options.key(), bucket)
        if time.monotonic() - _checked.get(key, -1e9) < 10:
            return
        try:
            info = self.fs.get_file_info(bucket)
        except OSError as e:
            raise self.error(e) from None
        if info.type == pafs.FileType.NotFound:
            raise DataRootError(f"data root {self.describe()} cannot be used: the bucket {bucket!r} does not exist")
        _checked[key] = time.monotonic()

    def uri_of(self, path: str) -> str:
        """A path of this root's filesystem as a URI (a local path as it is)."""
        if self.local:
            return path
        return f"{self.scheme}://{path}"

    def __truediv__(self, name: str) -> "DataPath":
        return DataPath(self, self.path) / name

    def at(self, *parts: str) -> "DataPath":
        """The root itself (no parts) or a path below it."""
        return DataPath(self, self.join(*parts) if parts else self.path)

    def join(self, *parts: str) -> str:
        return "/".join([self.path.rstrip("/"), *parts])

    def partition_dir(self, dataset: str, cluster: str, day: dt.date) -> str:
        return self.join(dataset, f"cluster={cluster}", f"date={day.isoformat()}")

    def info(self, path: str) -> pafs.FileInfo:
        try:
            info = self.fs.get_file_info(path)
        except OSError as e:
            if _is_store_error(e):
                raise self.error(e, f"looking at {self.uri_of(path)}") from None
            raise
        if info.type == pafs.FileType.File and info.size == 4096 and not self.local \
                and any(True for _ in self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))):
            return pafs.FileInfo(path, pafs.FileType.Directory)  # a folder s3proxy also shows as a blob
        return info

    def _folder_blob(self, info: pafs.FileInfo) -> bool:
        """Whether a file an object store listed is a folder: a filesystem-backed S3 server (the lab's
        s3proxy) lists each folder, empty ones too, as a 4096-byte blob beside it."""
        if self.local or info.type != pafs.FileType.File or info.size != 4096:
            return False
        try:
            # such a blob has no object behind it (its HEAD finds none) unless it holds files
            if self.fs.get_file_info(info.path).type != pafs.FileType.File:
                return True
            return any(True for _ in self.fs.get_file_info(pafs.FileSelector(info.path, allow_not_found=True)))
        except OSError:
            return False

    def exists(self, path: str) -> bool:
        return self.info(path).type != pafs.FileType.NotFound

    def listing(self, path: str, recursive: bool = False) -> list[pafs.FileInfo]:
        """The entries under a folder ([] when it does not exist), folders listed as folders only."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=recursive, allow_not_found=True))
        except OSError as e:
            if _is_store_error(e):
                raise self.error(e, f"listing {self.uri_of(path)}") from None
            raise
        dirs = {i.path for i in infos if i.type == pafs.FileType.Directory}
        out = []
        for i in infos:
            if i.type == pafs.FileType.File and (i.path in dirs or self._folder_blob(i)):
                if i.path not in dirs:
                    out.append(pafs.FileInfo(i.path, pafs.FileType.Directory))
                    dirs.add(i.path)
                continue
            out.append(i)
        return out

    def read_bytes(self, path: str) -> bytes:
        try:
            with self.fs.open_input_stream(path) as f:
                return f.read()
        except OSError as e:
            if _is_store_error(e):
                raise self.error(e, f"reading {self.uri_of(path)}") from None
            raise

    def read_json(self, path: str, default=None):
        if not self.exists(path):
            return default
        return json.loads(self.read_bytes(path).decode("utf-8"))

    def publish_bytes(self, path: str, data: bytes) -> None:
        """Publish one file whole (the class's rule): a reader sees the old content or the new, never part."""
        parent, name = path.rsplit("/", 1)
        try:
            if self.local:
                os.makedirs(parent, exist_ok=True)
                tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{name}"
                try:
                    with open(tmp, "wb") as f:
                        f.write(data)
                    os.replace(tmp, path)
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                return
            # the whole content is in hand: one stream, written once and closed (the upload completes
            # at close only; a failed or killed upload leaves no object)
            stream = self.fs.open_output_stream(path)
            stream.write(data)
            stream.close()
        except OSError as e:
            if _is_store_error(e):
                raise self.error(e, f"writing {self.uri_of(path)}") from None
            raise

    def delete_tree(self, path: str) -> None:
        """Remove a folder and everything under it. On an object store object by object (DeleteObject):
        the batch call (DeleteObjects) needs a checksum some S3-compatible servers do not take."""
        if self.local:
            if self.exists(path):
                self.fs.delete_dir(path)
            return
        infos = self.listing(path, recursive=True)
        if self.info(path).type == pafs.FileType.File:
            infos.append(self.info(path))
        for info in infos:
            if info.type == pafs.FileType.File:
                try:
                    self.fs.delete_file(info.path)
                except FileNotFoundError:
                    pass

    def write_json_atomic(self, path: str, doc) -> None:
        self.publish_bytes(path, json.dumps(doc, sort_keys=True, indent=1).encode("utf-8"))

    def files(self, dataset: str, cluster: str | None = None) -> list[str]:
        """Committed data files of a dataset (temporary and hidden files skipped)."""
        base = self.join(dataset) if cluster is None else self.join(dataset, f"cluster={cluster}")
        return sorted(i.path for i in self.listing(base, recursive=True)
                      if i.type == pafs.FileType.File and not os.path.basename(i.path).startswith(("_", "."))
                      and not any(p.startswith(("_", ".")) for p in i.path[len(base):].split("/")[:-1]))


class DataStat:
    """What pathlib's stat() gives that readers use: size and modification time."""

    __slots__ = ("st_size", "st_mtime_ns", "st_mtime")

    def __init__(self, size: int, mtime_ns: int):
        self.st_size, self.st_mtime_ns, self.st_mtime = size, mtime_ns, mtime_ns / 1e9


class DataPath:
    """A file or folder under a DataRoot, used as pathlib's Path is (`/`, name, parent, exists,
    read_text, glob...), on a local folder and an object store alike. str() is its URI (a local
    path as it is); os.fspath() works for a local one only."""

    __slots__ = ("root", "path")

    def __init__(self, root: DataRoot, path: str):
        self.root, self.path = root, path.rstrip("/") or path

    # names
    def __truediv__(self, name) -> "DataPath":
        name = str(name).strip("/")
        return DataPath(self.root, f"{self.path}/{name}" if name else self.path)

    def joinpath(self, *names) -> "DataPath":
        out = self
        for n in names:
            out = out / n
        return out

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def with_name(self, name: str) -> "DataPath":
        return self.parent / name

    @property
    def suffix(self) -> str:
        return os.path.splitext(self.name)[1]

    @property
    def parent(self) -> "DataPath":
        return DataPath(self.root, self.path.rsplit("/", 1)[0]) if "/" in self.path else self

    @property
    def local(self) -> bool:
        return self.root.local

    def __str__(self) -> str:
        return self.root.uri_of(self.path)

    def __repr__(self) -> str:
        return f"DataPath({str(self)!r})"

    def __fspath__(self) -> str:
        if not self.local:
            raise TypeError(f"{self} is not a local path")
        return self.path

    def __eq__(self, other) -> bool:
        return isinstance(other, DataPath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    # looking
    def info(self) -> pafs.FileInfo:
        return self.root.info(self.path)

    def exists(self) -> bool:
        return self.info().type != pafs.FileType.NotFound

    def is_file(self) -> bool:
        return self.info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        return self.info().type == pafs.FileType.Directory

    def stat(self) -> DataStat:
        info = self.info()
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(str(self))
        return DataStat(info.size or 0, _mtime_ns(info))

    def iterdir(self) -> list["DataPath"]:
        return [DataPath(self.root, i.path) for i in self.root.listing(self.path)]

    def glob(self, pattern: str) -> list["DataPath"]:
        """Paths matching a relative pattern of `/`-separated fnmatch parts (no `**`)."""
        import fnmatch

        level = [self]
        for part in pattern.split("/"):
            nxt = []
            for p in level:
                if any(c in part for c in "*?["):
                    nxt += [c for c in p.iterdir() if fnmatch.fnmatchcase(c.name, part)]
                else:
                    nxt.append(p / part)
            level = nxt
        return [p for p in level if p.exists()]

    # reading
    def read_bytes(self) -> bytes:
        return self.root.read_bytes(self.path)

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def open_input(self):
        """A random-access file (Parquet footers)."""
        return self.root.fs.open_input_file(self.path)

    # writing (DataRoot's rule of atomic publishing)
    def mkdir(self, parents: bool = True, exist_ok: bool = True) -> None:
        self.root.fs.create_dir(self.path, recursive=parents)

    def write_bytes(self, data: bytes) -> None:
        self.root.publish_bytes(self.path, data)

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def mark_done(self) -> None:
        """Publish this folder's `_SUCCESS` marker on an object store: its files are all written
        (write it last). A local folder needs none (see done)."""
        if not self.local:
            (self / SUCCESS).write_bytes(b"")

    def done(self) -> bool:
        """Whether this run folder is complete: its `_SUCCESS` marker exists (on an object store), or
        it is a local folder (renamed files; older runs have no marker)."""
        return self.local or (self / SUCCESS).exists()

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.root.fs.delete_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise
        except OSError:
            if not missing_ok or self.exists():
                raise

    def rmtree(self) -> None:
        self.root.delete_tree(self.path)


#: the marker a run folder of several files gets last
SUCCESS = "_SUCCESS"


def data_path(where: "DataPath | str | os.PathLike") -> DataPath:
    """A DataPath for a DataPath, a local path or a URI (s3://bucket/key: through the installed store)."""
    if isinstance(where, DataPath):
        return where
    root = DataRoot(str(where))
    return root.at()


def as_path(where: "DataPath | str | os.PathLike"):
    """pathlib's Path for a local path (what local callers always had), a DataPath for a URI or a DataPath."""
    from pathlib import Path

    if isinstance(where, DataPath) or "://" in str(where):
        return data_path(where)
    return Path(where)


def newest_in_runs(base: "DataPath | str | os.PathLike", name: str) -> DataPath | None:
    """The newest <base>/<run>/<name> by modification time, or None; on an object store only runs
    marked done (DataPath.done). A run removed between the listing and the look is skipped."""
    base = data_path(base)
    best, best_mtime = None, None
    for run in base.iterdir():
        if run.name.startswith(("_", ".")):
            continue
        info = (run / name).info()
        if info.type != pafs.FileType.File or not run.done():
            continue
        if best_mtime is None or _mtime_ns(info) > best_mtime:
            best, best_mtime = run / name, _mtime_ns(info)
    return best


def read_jsonl(path) -> list[dict]:
    """The rows of a job's JSON Lines result file ([] when it does not exist): a local path, a URI
    or a DataPath."""
    p = data_path(path)
    if not p.is_file():
        return []
    return [json.loads(line) for line in p.read_bytes().splitlines() if line.strip()]


def publish_rows(rows, dest) -> None:
    """Write `rows` as JSON Lines to `dest` (published whole: DataRoot's rule)."""
    p = data_path(dest)
    p.write_bytes("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))


def publish_text(text: str, dest) -> None:
    """Write `text` (UTF-8) to `dest` (published whole: DataRoot's rule)."""
    data_path(dest).write_text(text)


def publish_copy(src, dest) -> None:
    """Copy a job's output file (a local path, a URI or a DataPath) to `dest` so that a reader (the
    fleet page, a person) sees the old file or the new one, never a half-written one."""
    s = data_path(src)
    if not s.is_file():
        raise FileNotFoundError(f"{s}: no such file")
    data_path(dest).write_bytes(s.read_bytes())


def warm_up_conversion() -> threading.Thread | None:
    """Start, in a daemon thread, what pyarrow does at its first conversion of Python values in a
    process: it imports pandas (its pandas shim asks whether the values are a pandas object), about
    a second of CPU. A collection starts it before it waits on the brokers, so that table_from_rows
    does not pay for it at the end. None when already done."""
    import sys

    if "pandas" in sys.modules:
        return None
    t = threading.Thread(target=lambda: pa.array([None]), name="arrow-warm-up", daemon=True)
    t.start()
    return t


def table_from_rows(dataset: str, rows: list[Mapping]) -> pa.Table:
    schema = SCHEMAS[dataset]
    cols = {name: [r.get(name) for r in rows] for name in schema.names}
    return pa.Table.from_pydict(cols, schema=schema)


@dataclass
class WriteResult:
    files: dict[str, str]
    rows: dict[str, int]


class Staging:
    """Files staged under `_tmp-` names (invisible to readers), renamed into place together by
    commit(); abort() removes them. A collection uses one Staging: all of it lands, or none."""

    def __init__(self, root: DataRoot, cluster: str, observed_at: dt.datetime):
        self.root, self.cluster = root, cluster
        self.day = observed_at.astimezone(dt.timezone.utc).date()
        self.stamp = observed_at.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        self.batch = uuid.uuid4().hex[:12]
        self.staged: list[tuple[str, str, str]] = []
        self.rows: dict[str, int] = {}

    def add(self, dataset: str, rows: list[Mapping]) -> None:
        self.add_table(dataset, table_from_rows(dataset, list(rows)))

    def add_table(self, dataset: str, table: pa.Table) -> None:
        """Stage a table of the dataset's schema (one Parquet file)."""
        if table.schema != SCHEMAS[dataset]:
            raise ValueError(f"a table for dataset {dataset} has another schema than the dataset's:\n{table.schema}")
        folder = self.root.partition_dir(dataset, self.cluster, self.day)
        self.root.fs.create_dir(folder, recursive=True)
        n = sum(1 for d, _, _ in self.staged if d == dataset)
        suffix = f"-{n}" if n else ""
        final = f"{folder}/part-{self.stamp}-{self.batch}{suffix}.parquet"
        tmp = f"{folder}/_tmp-{self.stamp}-{self.batch}{suffix}.parquet"
        try:
            pq.write_table(table, tmp, filesystem=self.root.fs, compression="zstd")
        except BaseException:
            self._delete(tmp)
            raise
        self.staged.append((dataset, tmp, final))
        self.rows[dataset] = self.rows.get(dataset, 0) + len(table)

    def _delete(self, path: str) -> None:
        try:
            self.root.fs.delete_file(path)
        except OSError:
            pass

    def abort(self) -> None:
        for _, tmp, _ in self.staged:
            self._delete(tmp)
        self.staged = []

    def commit(self) -> WriteResult:
        for _, tmp, final in self.staged:
            self.root.fs.move(tmp, final)
        return WriteResult(files={d: f for d, _, f in self.staged}, rows=dict(self.rows))


def write_collection(root: DataRoot, cluster: str, observed_at: dt.datetime,
                     rows: Mapping[str, list[Mapping]]) -> WriteResult:
    """Write one collection's rows (dataset -> rows) all-or-nothing."""
    staging = Staging(root, cluster, observed_at)
    try:
        for dataset, drows in rows.items():
            staging.add(dataset, drows)
    except BaseException:
        staging.abort()
        raise
    return staging.commit()


def cluster_of_path(path: str) -> str | None:
    """The cluster of a dataset file from its `cluster=<name>` folder (None outside one)."""
    import re

    m = re.search(r"/cluster=([^/]+)/", path)
    return m.group(1) if m else None


def files_of_clusters(files: list[str], root: str, dataset: str, clusters: list[str] | None) -> list[str]:
    """A dataset's files, with `clusters` only those of their `cluster=<name>` folders (a cluster taken
    out of the fleet file leaves its data behind, with no settings to judge it by), naming the
    clusters left out on stdout; none left: SystemExit naming the dataset and the root."""
    if clusters is not None:
        left_out = sorted({c for c in map(cluster_of_path, files) if c not in clusters})
        if left_out:
            print(f"{dataset}: left out the data of {len(left_out)} cluster(s) not in the fleet file: "
                  f"{', '.join(left_out[:10])}{' ...' if len(left_out) > 10 else ''}", flush=True)
        files = [f for f in files if cluster_of_path(f) in clusters]
    if not files:
        raise SystemExit(f"no {dataset} data under {root}" + (f" for the clusters {', '.join(clusters)}" if clusters else "")
                         + " (run the offsets collection first)")
    return files


def date_folder_before(name: str, since: dt.date | None) -> bool:
    """Whether a folder named date=YYYY-MM-DD holds a day before `since` (False for any other name,
    and for no `since`): what the jobs skip when told to read only recent days."""
    if since is None or not name.startswith("date="):
        return False
    try:
        return dt.date.fromisoformat(name[5:]) < since
    except ValueError:
        return False


def read_dataset(root: DataRoot, dataset: str, cluster: str | None = None,
                 since: dt.date | None = None) -> pa.Table:
    """All committed rows of a dataset (for tests, small reports and the CLI; Spark reads at scale),
    optionally only from date partitions on or after `since`."""
    files = root.files(dataset, cluster)
    if since is not None:
        def day_of(path: str) -> dt.date | None:
            for part in path.split("/"):
                if part.startswith("date="):
                    try:
                        return dt.date.fromisoformat(part[5:])
                    except ValueError:
                        return None
            return None
        files = [f for f in files if (day_of(f) or since) >= since]
    if not files:
        return SCHEMAS[dataset].empty_table()
    return pa.concat_tables([read_file(root, f, SCHEMAS[dataset]) for f in files])


def read_file(root: DataRoot, path: str, schema: pa.Schema) -> pa.Table:
    """One data file as a table of `schema`: a column the file lacks (written before the column
    existed) is null, a column the schema lacks is dropped, every column cast to the schema's type.
    Read with ParquetFile, not pq.read_table: that goes through pyarrow.dataset, whose import
    imports pandas (0.5 s of every incident command's start, seconds on a loaded machine)."""
    if not root.local and path.startswith(f"{root.scheme}://"):
        path = path.split("://", 1)[1]  # a URI of the root's store (input listings give them)
    with root.fs.open_input_file(path) as f:
        table = pq.ParquetFile(f).read()
    names = set(table.column_names)
    cols = [table[fld.name].cast(fld.type) if fld.name in names else pa.nulls(table.num_rows, fld.type)
            for fld in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def file_time(path: str) -> dt.datetime | None:
    """The collection time in a data file's name (part-<YYYYmmddTHHMMSSffffffZ>-<batch>.parquet)."""
    name = os.path.basename(path)
    if not name.startswith("part-"):
        return None
    try:
        return dt.datetime.strptime(name[5:27], "%Y%m%dT%H%M%S%fZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def newest_collection(root: DataRoot, dataset: str, cluster: str) -> list[str]:
    """The files of a cluster's newest collection in a dataset ([] when it has none): the newest
    date folder holding data files, the files of its newest collection time (one collection writes
    part-<time>-<batch>[-n].parquet). Two listings, whatever the history kept."""
    base = root.join(dataset, f"cluster={cluster}")
    days = sorted((i.path for i in root.listing(base) if i.type == pafs.FileType.Directory
                   and os.path.basename(i.path).startswith("date=")), reverse=True)
    for day in days:
        files = [i.path for i in root.listing(day) if i.type == pafs.FileType.File
                 and file_time(i.path) is not None]
        if files:
            newest = max(files, key=lambda f: (file_time(f), os.path.basename(f)))
            batch = os.path.basename(newest)[:40]  # part-<time>-<batch>
            return sorted(f for f in files if os.path.basename(f).startswith(batch))
    return []


def read_recent(root: DataRoot, dataset: str, cluster: str, since: dt.datetime,
                groups: list[str] | None = None) -> list[dict]:
    """The rows of one cluster's collections at or after `since` (chosen by the time in the file
    names, so a month of history costs a directory listing), optionally only some groups' rows."""
    files = [f for f in root.files(dataset, cluster) if (file_time(f) or since) >= since]
    if not files or (groups is not None and not groups):  # no group: no rows (an empty isin set has no type)
        return []
    table = pa.concat_tables([read_file(root, f, SCHEMAS[dataset]) for f in files])
    if groups is not None:
        table = table.filter(pc.is_in(table["group"], value_set=pa.array(list(groups), pa.string())))
    return list(iter_rows(table))


def prune(root: DataRoot, dataset: str, cluster: str, keep_days: int, today: dt.date | None = None) -> list[str]:
    """Remove date partitions older than keep_days. Returns the removed folders."""
    today = today or utcnow().date()
    base = root.join(dataset, f"cluster={cluster}")
    if not root.exists(base):
        return []
    removed = []
    for info in root.fs.get_file_info(pafs.FileSelector(base)):
        name = os.path.basename(info.path)
        if info.type != pafs.FileType.Directory or not name.startswith("date="):
            continue
        try:
            day = dt.date.fromisoformat(name[5:])
        except ValueError:
            continue
        if (today - day).days > keep_days:
            root.delete_tree(info.path)
            removed.append(info.path)
    return removed


def iter_rows(table: pa.Table) -> Iterable[dict]:
    return table.to_pylist()
