"""The stuck job in this process, for small inputs: the same outputs as
spark_jobs/stuck.py without Spark's start-up.

A scheduled run over a few hundred or thousand snapshot rows spends 20-60 s starting a JVM and
Python workers for well under a second of work. Below `SMALL_ROWS` input rows (on a local path) the
job runs here instead: the stages of fleetkit.stuck.stages, each once on the whole input, where the
Spark job runs them per task; the same files (findings.jsonl, groups.jsonl, series.jsonl) and, given
a data root, the `stuck_findings` and `stuck_groups` datasets.

Nothing here imports Spark: numpy and pyarrow only.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections import Counter

from fleetkit.core import inprocess as core_inprocess
from fleetkit.core.datasets import publish_rows
from fleetkit.core.inprocess import (  # noqa: F401 - is_local, readable_here: the job asks here
    input_files, is_local, readable_here)
from fleetkit.stuck import rules, stages
from fleetkit.stuck.columnar import KEYS, TP_KEYS

JOB = "stuck"
#: inputs up to this many rows are judged in process (a deployment may change it with the
#: FLEET_STUCK_INPROCESS_MAX_ROWS environment variable; 0 always uses Spark): fleetkit.core.inprocess
SMALL_ROWS = core_inprocess.LIMITS[JOB][1]


def max_rows() -> int:
    return core_inprocess.max_rows(JOB)


def small_input(path: str, since: dt.date | None = None) -> bool:
    """Whether the job's input is small enough to judge in process (and on a local path)."""
    return core_inprocess.small_input(JOB, path, since)


def read_snapshots(parquet: list[str], jsonl: list[str]):
    """The input as one table of the offsets_snapshots schema (columns a file lacks are null)."""
    return core_inprocess.read_table(parquet, jsonl, "offsets_snapshots")


def evaluate(snapshots, window: dt.timedelta, as_of: dt.datetime | None = None,
             ratio: float = rules.DEFAULT_LAG_GROWTH_RATIO,
             retention: dt.timedelta = rules.DEFAULT_OFFSETS_RETENTION):
    """The whole input as one task of the Spark job -> (findings, groups, as_of): tables of
    stuck_findings and stuck_groups."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = snapshots.set_column(snapshots.schema.get_field_index("source"), "source",
                             pc.fill_null(snapshots["source"], "kafka"))
    if as_of is None:
        newest = pc.max(t["observed_at"]).as_py() if t.num_rows else None
        as_of = stages.utc(newest) or dt.datetime.now(dt.timezone.utc)
    words = sorted({w for c in ("rejoin_cause", "assignor") for w in t[c].to_pylist() if w is not None})
    code = {w: i + 1 for i, w in enumerate(words)}
    task = t.select([*KEYS, "observed_at", "committed_offset", "log_start_offset", "log_end_offset", "assigned",
                     "commit_interval_seconds", "committed_at", "committed_record_timestamp", "generation",
                     "rejoins"])
    task = task.append_column("_rebalancing", pc.fill_null(pc.is_in(t["group_state"], value_set=pa.array(
        sorted(rules.REBALANCING), pa.string())), False))
    for name, column in (("_cause", "rejoin_cause"), ("_assignor", "assignor")):
        task = task.append_column(name, pa.array([code.get(w) for w in t[column].to_pylist()], pa.int64()))
    out = stages.task(task, stages.Judgement(as_of, window, ratio, retention, words)) if t.num_rows else None
    if out is None:
        return stages.FINDING.empty_table(), stages.GROUP.empty_table(), as_of
    findings = stages.task_kind(out, 0, stages.FINDING_INPUT)
    findings = stages.with_time_lag(findings, stages.task_kind(out, 2, [*TP_KEYS, "points"]), as_of)
    return findings, stages.task_kind(out, 1, stages.GROUP.names), as_of


def lag_series(findings, snapshots, as_of: dt.datetime, window: dt.timedelta):
    """The report's chart series (stuck_series) of the worst flagged findings."""
    return stages.chart(stages.worst_flagged(findings), snapshots, as_of, window)


def write_dataset(table, data_root: str, dataset: str, run_stamp: str) -> str:
    """Append a table as Parquet to <root>/<dataset>/date=<day>/run=<stamp>/ (written to a _tmp
    folder, then renamed: readers never see a half-written run), as the Spark job does."""
    import pyarrow.parquet as pq

    day = dt.datetime.now(dt.timezone.utc).date().isoformat()
    root = core_inprocess.location(data_root).root
    folder = root.at(dataset, f"date={day}")
    final = folder / f"run={run_stamp}"
    if final.exists():
        raise FileExistsError(f"{final} already exists")
    tmp = folder / f"_tmp-run={run_stamp}-{uuid.uuid4().hex}"
    if root.local:
        os.makedirs(tmp.path)
        pq.write_table(table, f"{tmp.path}/part-00000.parquet")
        os.replace(tmp.path, final.path)
    else:
        # an object store has no rename: the one file is written under the _tmp- name, then copied whole
        try:
            pq.write_table(table, (tmp / "part-00000.parquet").path, filesystem=root.fs)
            root.fs.move((tmp / "part-00000.parquet").path, (final / "part-00000.parquet").path)
        finally:
            tmp.rmtree()
    return str(final)


def run(snapshots_path: str, out: str, window: dt.timedelta, as_of: dt.datetime | None, ratio: float,
        retention: dt.timedelta, data_root: str | None = None, since: dt.date | None = None) -> dict:
    """The whole job in process: read, judge, write the files; returns the job's summary line."""
    import time

    t0 = time.monotonic()
    parquet, jsonl = input_files(snapshots_path, since)
    if not parquet and not jsonl:
        raise SystemExit(f"input {snapshots_path!r} holds no .parquet or .jsonl files")
    snapshots = read_snapshots(parquet, jsonl)
    findings, groups, as_of = evaluate(snapshots, window, as_of, ratio, retention)
    folder = core_inprocess.location(out)
    folder.mkdir(parents=True, exist_ok=True)
    publish_rows(stages.as_json(findings), folder / "findings.jsonl")
    publish_rows(stages.as_json(groups), folder / "groups.jsonl")
    publish_rows(stages.as_json(lag_series(findings, snapshots, as_of, window)), folder / "series.jsonl")
    folder.mark_done()
    if data_root:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        write_dataset(findings, data_root, "stuck_findings", stamp)
        write_dataset(groups, data_root, "stuck_groups", stamp)
    statuses = Counter(findings.column("status").to_pylist())
    return {"as_of": as_of.isoformat().replace("+00:00", "Z"), "window_seconds": window.total_seconds(),
            "partitions": findings.num_rows, "groups": groups.num_rows, "statuses": dict(statuses),
            "seconds": round(time.monotonic() - t0, 1), "out": str(out), "engine": "in-process",
            "input_rows": snapshots.num_rows}
