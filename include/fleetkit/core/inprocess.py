"""Which Spark jobs' inputs are small enough to run in the calling process (no JVM, no Spark
start-up), and the local file listing those engines read.

A scheduled run over a few thousand rows spends 20-60 s starting Spark for well under a second of
work. A job with an in-process engine (fleetkit.stuck.inprocess, fleetkit.trim.inprocess) runs it
when its input is on a local path and holds at most the job's row limit (`LIMITS`: the environment
variable a deployment sets to change it, 0 always using Spark, and its default). The Spark job's
`--engine auto` and the Airflow operator (fleet_airflow.operators.spark) decide with `small_input`.

Nothing here imports Spark: pyarrow only.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from fleetkit.core.datasets import SCHEMAS, data_path, date_folder_before, read_jsonl

#: per job (spark_jobs/<job>.py): (the environment variable of its row limit, the default limit,
#: the datasets under the job's input whose rows are counted, none: the input itself)
LIMITS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "stuck": ("FLEET_STUCK_INPROCESS_MAX_ROWS", 200_000, ()),
    "trim_health": ("FLEET_TRIM_INPROCESS_MAX_ROWS", 1_000_000, ("offsets_topic_records",)),
    "group_ids": ("FLEET_GROUP_IDS_INPROCESS_MAX_ROWS", 1_000_000,
                  ("group_id_mappings", "group_members")),
}


#: a limit's earlier name, still read when the new one is not set (a deployment's settings keep working)
OLD_NAMES = {"FLEET_TRIM_INPROCESS_MAX_ROWS": "FLEET_OFFSETS_INPROCESS_MAX_ROWS"}


def max_rows(job: str) -> int:
    """The job's row limit for the in-process engine (0: always Spark)."""
    env, default, _ = LIMITS[job]
    value = os.environ.get(env)
    if value is None and env in OLD_NAMES:
        value = os.environ.get(OLD_NAMES[env])
    try:
        return max(0, int(value if value is not None else default))
    except ValueError:
        return default


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def readable_here(path: str) -> bool:
    """Whether an in-process engine reads and writes `path`: a local one, or one on the data root's
    object store (s3://, through fleetkit.core.datasets.DataRoot)."""
    return is_local(path) or path.startswith("s3://")


def location(path: str):
    """A job's input or output path as a fleetkit.core.datasets.DataPath (file:// taken as local)."""
    return data_path(str(local_path(path)) if is_local(path) else path)


def _parquet(f: str):
    """A Parquet file to read: a local path as it is, a URI opened through its DataRoot."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(f if is_local(f) else data_path(f).open_input())


def local_path(path: str) -> Path:
    return Path(path[len("file://"):] if path.startswith("file://") else path)


def input_files(path: str, since: dt.date | None = None) -> tuple[list[str], list[str]]:
    """(parquet files, JSON Lines files) under a file or folder (local, or a URI of the data root's
    object store), as the Spark jobs list them (jobs_common.data_files): names starting with _ or .
    skipped (files and folders), date=YYYY-MM-DD folders older than `since` skipped."""
    from pyarrow import fs as pafs

    root = location(path)
    info = root.info()
    if info.type == pafs.FileType.NotFound:
        raise SystemExit(f"input {path!r} does not exist")
    files: list[str] = []
    if info.type == pafs.FileType.File:
        files = [str(root)]
    else:
        base = root.path.rstrip("/") + "/"
        for i in root.root.listing(root.path, recursive=True):
            if i.type != pafs.FileType.File:
                continue
            parts = i.path[len(base):].split("/")
            if any(p.startswith(("_", ".")) for p in parts) or any(date_folder_before(d, since) for d in parts[:-1]):
                continue
            files.append((tuple((1, d) for d in parts[:-1]) + ((0, parts[-1]),), root.root.uri_of(i.path)))
        # os.walk's order, as the jobs list them: a folder's files (by name), then its folders (by name)
        files = [f for _, f in sorted(files)]
    parquet = [f for f in files if f.endswith(".parquet")]
    jsonl = [f for f in files if f.endswith((".jsonl", ".json"))]
    return parquet, jsonl


def count_rows(parquet: list[str], jsonl: list[str], limit: int) -> int | None:
    """The input's rows (Parquet footers, JSON Lines lines), or None once more than `limit` (or a
    file that cannot be read: the Spark job then names it)."""
    n = 0
    try:
        for f in parquet:
            n += _parquet(f).metadata.num_rows
            if n > limit:
                return None
        for f in jsonl:
            for line in data_path(f).read_bytes().splitlines() if not is_local(f) else open(f, "rb"):
                n += bool(line.strip())
                if n > limit:
                    return None
    except Exception:  # noqa: BLE001 - unreadable here: Spark reads it and says what is wrong
        return None
    return n


def small_input(job: str, path: str, since: dt.date | None = None) -> bool:
    """Whether `job`'s input at `path` (for trim_health and group_ids: the data
    root) is small enough to run in process, and on a local path or the data root's object store."""
    limit = max_rows(job)
    if limit <= 0 or not readable_here(path):
        return False
    datasets = LIMITS[job][2]
    here = location(path)
    targets = [here / d for d in datasets] if datasets else [here]
    if not any(t.exists() for t in targets):
        # a data root holding none of the job's datasets yet has nothing to count: no Spark needed
        # (the in-process engines write the job's files for an empty input); a missing input of its
        # own is the Spark job's to name
        return bool(datasets) and (here.is_dir() or not here.local)
    parquet: list[str] = []
    jsonl: list[str] = []
    for target in targets:
        if target.exists():
            p, j = input_files(str(target), since)
            parquet += p
            jsonl += j
    return count_rows(parquet, jsonl, limit) is not None


def iso_micro_z(t: dt.datetime | None) -> str | None:
    """The Spark jobs' JSON time format (jobs_common.ISO_Z: yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z')."""
    return None if t is None else t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_ts(value):
    if value is None or isinstance(value, dt.datetime):
        return value
    t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.timezone.utc)


def read_table(parquet: list[str], jsonl: list[str], dataset: str):
    """Parquet and JSON Lines files as one table of the dataset's schema (as the Spark jobs'
    read_rows: columns a file lacks are null, JSON timestamps ISO-8601 strings); a JSON line that is
    not such a row is a SystemExit naming the file and the line."""
    import pyarrow as pa

    schema = SCHEMAS[dataset]
    stamps = {f.name for f in schema if pa.types.is_timestamp(f.type)}
    tables = []
    for f in parquet:
        t = _parquet(f).read()
        names = set(t.column_names)
        tables.append(pa.Table.from_arrays(
            [t[fld.name].cast(fld.type) if fld.name in names else pa.nulls(t.num_rows, fld.type) for fld in schema],
            schema=schema))
    for f in jsonl:
        rows = []
        for number, r in enumerate(read_jsonl(f), 1):
            if not isinstance(r, dict):
                raise SystemExit(f"{f}: line {number} is not a JSON object")
            try:
                rows.append({fld.name: _parse_ts(r.get(fld.name)) if fld.name in stamps else r.get(fld.name)
                             for fld in schema})
            except ValueError as e:
                raise SystemExit(f"{f}: line {number}: {e}") from None
        try:
            tables.append(pa.Table.from_pylist(rows, schema=schema))
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:
            raise SystemExit(f"{f}: not {dataset} rows: {e}") from None
    return pa.concat_tables(tables) if tables else schema.empty_table()
