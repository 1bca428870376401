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

from fleetkit.core.datasets import date_folder_before

#: per job (spark_jobs/<job>.py): (the environment variable of its row limit, the default limit,
#: the dataset under the job's input whose rows are counted, None: the input itself)
LIMITS: dict[str, tuple[str, int, str | None]] = {
    "stuck_partitions": ("FLEET_STUCK_INPROCESS_MAX_ROWS", 200_000, None),
    "offsets_health": ("FLEET_OFFSETS_INPROCESS_MAX_ROWS", 1_000_000, "offsets_topic_records"),
}


def max_rows(job: str) -> int:
    """The job's row limit for the in-process engine (0: always Spark)."""
    env, default, _ = LIMITS[job]
    try:
        return max(0, int(os.environ.get(env, default)))
    except ValueError:
        return default


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> Path:
    return Path(path[len("file://"):] if path.startswith("file://") else path)


def input_files(path: str, since: dt.date | None = None) -> tuple[list[str], list[str]]:
    """(parquet files, JSON Lines files) under a local file or folder, as the Spark jobs list them
    (jobs_common.data_files): names starting with _ or . skipped (files and folders),
    date=YYYY-MM-DD folders older than `since` skipped."""
    root = local_path(path)
    if not root.exists():
        raise SystemExit(f"input {path!r} does not exist")
    files: list[str] = []
    if root.is_file():
        files = [str(root)]
    else:
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")) and not date_folder_before(d, since))
            files.extend(os.path.join(folder, n) for n in sorted(names) if not n.startswith(("_", ".")))
    parquet = [f for f in files if f.endswith(".parquet")]
    jsonl = [f for f in files if f.endswith((".jsonl", ".json"))]
    return parquet, jsonl


def count_rows(parquet: list[str], jsonl: list[str], limit: int) -> int | None:
    """The input's rows (Parquet footers, JSON Lines lines), or None once more than `limit` (or a
    file that cannot be read: the Spark job then names it)."""
    import pyarrow.parquet as pq

    n = 0
    try:
        for f in parquet:
            n += pq.ParquetFile(f).metadata.num_rows
            if n > limit:
                return None
        for f in jsonl:
            with open(f, "rb") as fh:
                for line in fh:
                    n += bool(line.strip())
                    if n > limit:
                        return None
    except Exception:  # noqa: BLE001 - unreadable here: Spark reads it and says what is wrong
        return None
    return n


def small_input(job: str, path: str, since: dt.date | None = None) -> bool:
    """Whether `job`'s input at `path` (for offsets_health: the data root) is small enough to run in
    process, and on a local path."""
    limit = max_rows(job)
    if limit <= 0 or not is_local(path):
        return False
    dataset = LIMITS[job][2]
    target = local_path(path) / dataset if dataset else local_path(path)
    if not target.exists():
        return False
    parquet, jsonl = input_files(str(target), since)
    return count_rows(parquet, jsonl, limit) is not None
