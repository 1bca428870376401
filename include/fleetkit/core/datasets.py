"""The toolkit's datasets (design.md): schemas, layout and atomic writes.

Layout under a data root (a local folder or any URI pyarrow understands, e.g. s3://bucket/x):

    <root>/<dataset>/cluster=<cluster>/date=<YYYY-MM-DD>/part-<time>-<id>.parquet

Every row also carries `cluster` and `observed_at` (UTC), so readers that look files up
recursively (Spark's recursiveFileLookup) lose nothing. A collection's files are first written
under names starting with `_tmp-` (ignored by every reader: Spark and the jobs skip files whose
names start with _ or .) and renamed into place only when every dataset of the collection was
written, so a failed collection leaves no partial rows.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs as pafs

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
        # where unknown (KIP-848 groups, ZooKeeper and Storm stores, older files)
        ("generation", pa.int32()), ("rejoins", pa.int32()), ("rejoin_cause", pa.string()),
        ("assignor", pa.string()),
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



def read_jsonl(path) -> list[dict]:
    """The rows of a job's JSON Lines result file ([] when it does not exist)."""
    import json
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _publish(dest, write) -> None:
    """Write `dest` through `write(tmp_path)` beside it, then rename it over `dest`: a reader sees
    the old file or the new one, never a half-written one."""
    from pathlib import Path

    dest = Path(dest)
    tmp = dest.with_name(f".tmp-{uuid.uuid4().hex}-{dest.name}")
    try:
        write(tmp)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()


def publish_rows(rows, dest) -> None:
    """Write `rows` as JSON Lines to `dest` (published as publish_copy publishes a file)."""
    import json

    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")

    _publish(dest, write)


def publish_text(text: str, dest) -> None:
    """Write `text` (UTF-8) to `dest` (published as publish_copy publishes a file)."""
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    _publish(dest, write)


def publish_copy(src, dest) -> None:
    """Copy a job's output file to `dest` so that a reader (the fleet page, a person) sees the old
    file or the new one, never a half-written one: copied beside it, then renamed over it."""
    import shutil

    _publish(dest, lambda tmp: shutil.copyfile(src, tmp))


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def iso_z(ts: dt.datetime | None) -> str | None:
    """ISO-8601 UTC with a trailing Z (the toolkit's JSON timestamp format)."""
    if ts is None:
        return None
    return ts.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


class DataRoot:
    """A data root folder or URI, with the filesystem that serves it."""

    def __init__(self, root: str | os.PathLike):
        root = str(root)
        if "://" in root:
            self.fs, self.path = pafs.FileSystem.from_uri(root)
        else:
            self.fs, self.path = pafs.LocalFileSystem(), os.path.abspath(root)
        self.uri = root

    def join(self, *parts: str) -> str:
        return "/".join([self.path.rstrip("/"), *parts])

    def partition_dir(self, dataset: str, cluster: str, day: dt.date) -> str:
        return self.join(dataset, f"cluster={cluster}", f"date={day.isoformat()}")

    def exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def read_json(self, path: str, default=None):
        if not self.exists(path):
            return default
        with self.fs.open_input_stream(path) as f:
            return json.loads(f.read().decode("utf-8"))

    def write_json_atomic(self, path: str, doc) -> None:
        parent, name = path.rsplit("/", 1)
        self.fs.create_dir(parent, recursive=True)
        tmp = f"{parent}/_tmp-{uuid.uuid4().hex}-{name}"
        with self.fs.open_output_stream(tmp) as f:
            f.write(json.dumps(doc, sort_keys=True, indent=1).encode("utf-8"))
        self.fs.move(tmp, path)

    def files(self, dataset: str, cluster: str | None = None) -> list[str]:
        """Committed data files of a dataset (temporary and hidden files skipped)."""
        base = self.join(dataset) if cluster is None else self.join(dataset, f"cluster={cluster}")
        if not self.exists(base):
            return []
        sel = pafs.FileSelector(base, recursive=True)
        return sorted(i.path for i in self.fs.get_file_info(sel)
                      if i.type == pafs.FileType.File and not os.path.basename(i.path).startswith(("_", ".")))


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
        return dt.datetime.strptime(name[5:29], "%Y%m%dT%H%M%S%fZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


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
            root.fs.delete_dir(info.path)
            removed.append(info.path)
    return removed


def iter_rows(table: pa.Table) -> Iterable[dict]:
    return table.to_pylist()
