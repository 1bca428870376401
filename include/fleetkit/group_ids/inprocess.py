"""The group_ids job in this process, for small inputs: the same files as
spark_jobs/group_ids.py without Spark's start-up.

The job's judgement is already the library's: `rules.diff`, the runbook's own aggregation, which
the Spark job runs on slices of each cluster's rows. Up to the row limit of fleetkit.core.inprocess
(FLEET_GROUP_IDS_INPROCESS_MAX_ROWS, 1,000,000 mappings and members by default; local paths only)
it runs here on each cluster's whole newest collection, and writes the same findings.jsonl and
summary.json. tests/spark/test_group_id_job.py runs the case table and the job's files through both.

Nothing here imports Spark.
"""

from __future__ import annotations

import datetime as dt
import json
import time

from fleetkit.core import inprocess as core
from fleetkit.core.datasets import iter_rows, publish_rows, publish_text
from fleetkit.group_ids import rules

JOB = "group_ids"
#: findings.jsonl's columns, in the Spark job's order
FINDING_COLUMNS = ("cluster", "path", "class", "reason", "group", "groups", "client_host", "client_id", "member_ids",
                   "znode_group", "znode_version", "ctime_ms", "mtime", "age_seconds")


def small_input(data_root: str) -> bool:
    """Whether the data root's group_id_mappings and group_members are few enough to judge here."""
    return core.small_input(JOB, data_root)


def _rows(path: str, dataset: str) -> tuple[list[dict], bool]:
    """(the rows of a dataset's files, whether they are all Parquet)."""
    if not core.location(path).exists():
        return [], True
    parquet, jsonl = core.input_files(path)
    return list(iter_rows(core.read_table(parquet, jsonl, dataset))), not jsonl


def _newest(rows: list[dict]) -> dict[str, dt.datetime]:
    """Each cluster's newest collection time in `rows` (read_table's times are UTC)."""
    newest: dict[str, dt.datetime] = {}
    for r in rows:
        newest[r["cluster"]] = max(newest.get(r["cluster"], r["observed_at"]), r["observed_at"])
    return newest


def classify(mappings: list[dict], members: list[dict], config: dict, default_root: str,
             default_grace: float) -> list[dict]:
    """Every finding (OK too) of each cluster's rows, by rules.diff on the cluster's whole rows."""
    clusters = sorted({r["cluster"] for r in mappings} | {r["cluster"] for r in members}, key=str)
    out = []
    for c in clusters:
        root, grace = config.get(c, (default_root, default_grace))
        found = rules.diff([r for r in mappings if r["cluster"] == c], [r for r in members if r["cluster"] == c],
                           root, grace)
        out += [{**{k: f.get(k) for k in FINDING_COLUMNS}, "cluster": c} for f in found]
    return out


def run(mappings_path: str, members_path: str, out: str, config: dict, default_root: str, grace: float,
        clusters: list[str] | None = None, cutoff: dt.datetime | None = None) -> dict:
    """The whole job in process; returns (and the caller prints) the job's summary."""
    t0 = time.monotonic()
    mappings, mappings_parquet = _rows(mappings_path, "group_id_mappings")
    members, members_parquet = _rows(members_path, "group_members")
    if clusters:
        mappings = [r for r in mappings if r["cluster"] in clusters]
        members = [r for r in members if r["cluster"] in clusters]
    newest = _newest(mappings + members)
    too_old: list[str] = []
    if cutoff is not None:
        if mappings_parquet and members_parquet:  # as the Spark job: a whole cluster left out, and named
            too_old = sorted(c for c, t in newest.items() if t < cutoff)
        else:  # JSON Lines input: the rows before the cutoff left out
            mappings = [r for r in mappings if r["observed_at"] >= cutoff]
            members = [r for r in members if r["observed_at"] >= cutoff]
            newest = _newest(mappings + members)

    def latest(r: dict) -> bool:
        return r["cluster"] not in too_old and r["observed_at"] == newest.get(r["cluster"])

    findings = classify([r for r in mappings if latest(r)], [r for r in members if latest(r)], config, default_root,
                        grace)
    counts: dict[str, dict[str, int]] = {}
    for f in findings:
        per = counts.setdefault(f["cluster"], {})
        per[f["class"]] = per.get(f["class"], 0) + 1
    shown = sorted((f for f in findings if f["class"] != "OK"),
                   key=lambda f: (f["cluster"], f["class"], f["path"] is not None, f["path"] or ""))
    folder = core.location(out)
    folder.mkdir(parents=True, exist_ok=True)
    publish_rows([{**f, "mtime": core.iso_micro_z(f["mtime"])} for f in shown], folder / "findings.jsonl")
    summary = {"clusters": counts, "findings": len(shown), "seconds": round(time.monotonic() - t0, 1),
               "skipped_old_collections": too_old}
    publish_text(json.dumps(summary, indent=1, sort_keys=True), folder / "summary.json")
    folder.mark_done()
    return summary
