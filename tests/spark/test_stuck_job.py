"""The stuck Spark job: the rule table through Spark, the file contract, spark-submit."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetkit.core.datasets import SCHEMAS
from tests.stuck_cases import CASES, SINCE, T0, WINDOW

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "spark_jobs"))
pytestmark = pytest.mark.spark

AS_OF = dt.datetime(2026, 2, 1, 0, 0, tzinfo=dt.timezone.utc)


def case_rows() -> list[dict]:
    """Every case as its own group, shifted so that its last snapshot is at AS_OF."""
    rows = []
    for number, name, case, _, _ in CASES:
        shift = AS_OF - max(r["observed_at"] for r in case)
        for r in case:
            # a topic per case: cases are separate logs (the time lag reads a partition's log end history)
            rows.append({"cluster": "c1", "group": f"case-{number:02d}", "topic": f"t-{number:02d}", "partition": 0,
                         "member_client_id": None, "member_host": None, **r,
                         "observed_at": r["observed_at"] + shift,
                         **{k: r[k] + shift if r.get(k) else None
                            for k in ("committed_at", "committed_record_timestamp")}})
    return rows


def to_jsonl(rows, path: Path) -> Path:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps({**r, **{k: r[k].isoformat().replace("+00:00", "Z")
                                        for k in ("observed_at", "committed_at", "committed_record_timestamp")
                                        if r.get(k)}}) + "\n")
    return path


def test_rule_table_through_spark(spark):
    from stuck import evaluate

    from jobs_common import SNAPSHOT_SCHEMA

    df = spark.createDataFrame([tuple(r.get(f.name) for f in SNAPSHOT_SCHEMA.fields) for r in case_rows()],
                               SNAPSHOT_SCHEMA)
    findings, groups, as_of = evaluate(df, WINDOW)
    assert as_of == AS_OF
    rows = {r["group"]: r for r in findings.collect()}
    got = {g: r["status"] for g, r in rows.items()}
    for number, name, _, expected, why in CASES:
        assert got[f"case-{number:02d}"] == expected, f"case {number} ({name}): {why}"
    # the time lag, as fleetkit.stuck.timelag says from the same rows
    from fleetkit.stuck import rules as stuck
    from fleetkit.stuck import timelag

    by_case = {}
    for r in case_rows():
        by_case.setdefault(r["group"], []).append(r)
    kinds = set()
    for g, case in by_case.items():
        want = timelag.for_rows(case, AS_OF.timestamp())
        got_row = rows[g]
        kinds.add(want.kind)
        assert (got_row["lag_seconds"], got_row["lag_seconds_kind"], got_row["lag_seconds_error"]) == \
            (pytest.approx(want.seconds) if want.seconds is not None else None, want.kind,
             pytest.approx(want.error_seconds) if want.error_seconds is not None else None), g
    assert kinds == {"exact", "interpolated", "bounded", "unknown"}
    # one partition per case group: the group's status is its partition's, never OK for a partition not
    # judged; a group not judged yet says from when it can be, as the pure rules say
    statuses = {r["group"]: r for r in groups.collect()}
    for number, name, case, expected, _ in CASES:
        g = statuses[f"case-{number:02d}"]
        assert g["status"] == expected, f"case {number} ({name})"
        if expected == "INSUFFICIENT_DATA":
            f = stuck.features(case, max(r["observed_at"] for r in case), WINDOW)
            shift = (AS_OF - max(r["observed_at"] for r in case)).total_seconds()
            want = stuck.judge(f, WINDOW.total_seconds()).judged_from + shift
            assert g["judged_from"].replace(tzinfo=dt.timezone.utc).timestamp() == pytest.approx(want), number
        else:
            assert g["judged_from"] is None, number
    # the record timestamp of case 12 makes its time lag exact: 250 s (its why says so)
    assert (rows["case-12"]["lag_seconds"], rows["case-12"]["lag_seconds_kind"]) == (250.0, "exact")
    # since when and how sure, as the pure rules say (times shifted like the rows)
    for number, (since, confidence) in SINCE.items():
        case = next(c for c in CASES if c[0] == number)
        shift = AS_OF - max(r["observed_at"] for r in case[2])
        r = rows[f"case-{number:02d}"]
        want = None if since is None else (T0 + dt.timedelta(seconds=since) + shift).replace(tzinfo=None)
        assert (r["stalled_since"] or r["stopped_since"], r["confidence"]) == (want, confidence), f"case {number}"


STORM_GROUPS = {
    # group: per snapshot (generation, rejoins, latest rejoin cause), assignor, why
    "poll-eager": ([(10, 4, "restart"), (12, 5, "poll_interval"), (14, 6, "poll_interval")], "range",
                   "two rejoins in the window, the latest after ~max.poll.interval.ms; eager: group-wide stops"),
    "poll-coop": ([(3, 1, None), (5, 2, "poll_interval"), (7, 3, "poll_interval")], "cooperative-sticky",
                  "the same storm with the cooperative assignor: no group-wide stop"),
    "static-restarts": ([(1, 0, None), (1, 0, None), (1, 0, None)], "range",
                        "static members replaced within their session: no rebalance, no rejoin"),
    "one-restart": ([(4, 0, None), (6, 1, "restart"), (6, 1, "restart")], "range", "one restart is no storm"),
    # KIP-848 groups: (group epoch, departures counter (epoch - members) // 2) from ConsumerGroupDescribe
    "kip848-churn": ([(20, 8, None), (22, 9, None), (24, 10, None)], "consumer:uniform",
                     "a member leaving and joining twice: epoch up 4, 2 departures, 2 joins"),
    "kip848-steady": ([(7, 2, None), (7, 2, None), (7, 2, None)], "consumer:uniform",
                      "a steady KIP-848 group: epoch and members unchanged"),
    "kip848-scale-out": ([(3, 0, None), (5, 0, None), (7, 0, None)], "consumer:uniform",
                         "four members joining: epoch up 4, no departure, no storm"),
}


def storm_rows() -> list[dict]:
    """STORM_GROUPS as snapshot rows: two partitions per group, one snapshot 10 s apart per point."""
    rows = []
    for group, (points, assignor, _) in STORM_GROUPS.items():
        for i, (generation, rejoins, cause) in enumerate(points):
            for p in range(2):
                rows.append({"cluster": "c1", "group": group, "topic": "t", "partition": p,
                             "observed_at": AS_OF - dt.timedelta(seconds=10 * (len(points) - 1 - i)),
                             "committed_offset": 5, "log_start_offset": 0, "log_end_offset": 5,
                             "group_state": "Stable", "assigned": True, "generation": generation,
                             "rejoins": rejoins, "rejoin_cause": cause, "assignor": assignor})
    return rows


def test_storm_verdicts_through_spark_match_the_pure_rules(spark):
    # (before the tests that run main(): it stops the session)
    from stuck import evaluate

    from jobs_common import SNAPSHOT_SCHEMA

    rows = storm_rows()
    df = spark.createDataFrame([tuple(r.get(f.name) for f in SNAPSHOT_SCHEMA.fields) for r in rows], SNAPSHOT_SCHEMA)
    _, groups, _ = evaluate(df, WINDOW)
    got = {g["group"]: g for g in groups.collect()}
    from fleetkit.stuck import rules as stuck

    for group, (_, _, why) in STORM_GROUPS.items():
        want = stuck.storm([r for r in rows if r["group"] == group])
        g = got[group]
        assert (g["rebalance_storm"], g["storm_kind"], g["rebalances"], g["rejoins"], g["group_wide_stop"],
                g["storm_fix"]) == tuple(want), f"{group}: {why}"
    assert [gr for gr in STORM_GROUPS if got[gr]["rebalance_storm"]] == ["poll-eager", "poll-coop", "kip848-churn"]
    assert got["poll-coop"]["group_wide_stop"] is False and "max.poll.records" in got["poll-coop"]["storm_fix"]
    assert (got["kip848-churn"]["storm_kind"], got["kip848-churn"]["rejoins"]) == ("member_churn", 2)


ENGINES = pytest.mark.parametrize("engine", ["spark", "in-process"])


@ENGINES
def test_job_contract_on_jsonl_and_folder_input(spark, tmp_path, engine):
    from stuck import main

    # a folder: JSON Lines + Parquet (the dataset layout), plus files every reader must skip
    base = tmp_path / "in" / "offsets_snapshots" / "cluster=c1" / "date=2026-02-01"
    base.mkdir(parents=True)
    rows = case_rows()
    half = len(rows) // 2
    to_jsonl(rows[:half], base / "part-1.jsonl")
    table = pa.Table.from_pylist([dict(r, partition=r["partition"]) for r in rows[half:]],
                                 schema=SCHEMAS["offsets_snapshots"])
    pq.write_table(table, base / "part-2.parquet")
    (base / "_tmp-half.parquet").write_bytes(b"not parquet")
    (base / ".hidden.jsonl").write_text("{broken")
    assert main(["--snapshots", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--window", "10m",
                 "--master", "local[2]", "--engine", engine]) == 0
    findings = [json.loads(x) for x in (tmp_path / "out" / "findings.jsonl").read_text().splitlines()]
    assert len(findings) == len(CASES)
    by_group = {f["group"]: f for f in findings}
    for key in ("cluster", "group", "topic", "partition", "status", "lag", "committed_offset", "log_end_offset",
                "window_start", "window_end", "snapshots", "reason"):
        assert all(key in f for f in findings), key
    no_commit = by_group["case-01"]
    assert no_commit["status"] == "NO_COMMIT" and no_commit["lag"] is None and no_commit["snapshots"] == 0
    stalled = by_group["case-08"]
    assert (stalled["status"], stalled["lag"], stalled["committed_offset"], stalled["log_end_offset"],
            stalled["snapshots"]) == ("STALLED", 48, 42, 90, 4)
    assert stalled["window_end"] == "2026-02-01T00:00:00.000000Z"
    assert stalled["window_start"] == "2026-01-31T23:50:00.000000Z"
    stopped = by_group["case-09"]
    # unchanged since its first sighting (300 s before as_of); expires 1440 minutes after that
    assert stopped["unchanged_since"] == "2026-01-31T23:55:00.000000Z"
    assert stopped["offset_expires_at"] == "2026-02-01T23:55:00.000000Z"
    assert stopped["expires_in_seconds"] == 86400 - 300
    groups = [json.loads(x) for x in (tmp_path / "out" / "groups.jsonl").read_text().splitlines()]
    g = {x["group"]: x for x in groups}
    assert g["case-08"]["status"] == "STALLED" and g["case-08"]["counts"] == {"STALLED": 1}
    assert g["case-01"]["status"] == "NO_COMMIT" and g["case-01"]["total_lag"] == 0  # nothing to judge: not OK
    assert g["case-05"]["status"] == "INSUFFICIENT_DATA" and g["case-05"]["judged_from"] == "2026-02-01T00:05:00.000000Z"
    assert g["case-11"]["rebalance_storm"] is True   # PreparingRebalance in 3 of 3 snapshot times
    # no assignor recorded: whether a rebalance stops the whole group is not known, and the fix says no more
    assert g["case-11"]["group_wide_stop"] is None and "eager" not in g["case-11"]["storm_fix"]
    assert g["case-08"]["rebalance_storm"] is False


@ENGINES
def test_group_rollup_ranks_worst_first(spark, tmp_path, engine):
    from stuck import main

    t = AS_OF
    rows = []
    for p, (c, e) in enumerate([(10, 10), (5, 50), (7, 70)]):  # OK, STALLED (assigned), STOPPED (not)
        for i in range(4):
            rows.append({"cluster": "c1", "group": "g", "topic": "t", "partition": p,
                         "observed_at": t - dt.timedelta(seconds=100 * i), "committed_offset": c,
                         "log_start_offset": 0, "log_end_offset": e, "group_state": "Stable", "assigned": p == 1,
                         "member_client_id": None, "member_host": None})
    main(["--snapshots", str(to_jsonl(rows, tmp_path / "s.jsonl")), "--out", str(tmp_path / "o"), "--window", "10m",
          "--master", "local[2]", "--data-root", str(tmp_path / "data"), "--engine", engine])
    g = json.loads((tmp_path / "o" / "groups.jsonl").read_text())
    assert g["status"] == "STOPPED" and g["total_lag"] == 0 + 45 + 63
    assert g["counts"] == {"OK": 1, "STALLED": 1, "STOPPED": 1}
    assert list((tmp_path / "data" / "stuck_findings").glob("date=*/run=*/*.parquet"))


def test_bad_input_is_named(spark, tmp_path):
    from stuck import main

    with pytest.raises(SystemExit, match="does not exist"):
        main(["--snapshots", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="'soon' is not a duration"):
        main(["--snapshots", str(tmp_path), "--out", str(tmp_path / "o"), "--window", "soon"])
    with pytest.raises(SystemExit, match="not an ISO-8601 time"):
        main(["--snapshots", str(tmp_path), "--out", str(tmp_path / "o"), "--as-of", "yesterday"])


def test_spark_submit_entry_point(tmp_path):
    rows = case_rows()
    env = dict(os.environ, PATH=f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}", SPARK_LOCAL_IP="127.0.0.1")
    out = subprocess.run(["spark-submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                          str(REPO / "spark_jobs" / "stuck.py"),
                          "--snapshots", str(to_jsonl(rows, tmp_path / "s.jsonl")), "--out", str(tmp_path / "o"),
                          "--window", "10m", "--as-of", "2026-02-01T00:00:00Z", "--engine", "spark"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["partitions"] == len(CASES)
    assert summary["statuses"]["STALLED"] == sum(1 for c in CASES if c[3] == "STALLED")


@ENGINES
def test_no_rows_gives_empty_results_not_an_error(spark, tmp_path, engine):
    """A cluster with no groups yet: the collection writes a file with no rows; the job must not fail."""
    from stuck import main

    folder = tmp_path / "in" / "cluster=c1" / "date=2026-02-01"
    folder.mkdir(parents=True)
    pq.write_table(SCHEMAS["offsets_snapshots"].empty_table(), folder / "part-1.parquet")
    assert main(["--snapshots", str(tmp_path / "in"), "--out", str(tmp_path / "o"), "--master", "local[2]",
                 "--engine", engine]) == 0
    assert (tmp_path / "o" / "findings.jsonl").read_text() == ""
    assert (tmp_path / "o" / "groups.jsonl").read_text() == ""


def test_what_a_task_is_handed_reads_back_as_the_rows(live):
    """The job hands its tasks a row's cluster, source and group as one string and its small values
    packed into two longs; the task's unpacking gives back exactly the values, for hostile names
    (colons, dashes, digits, quotes, emoji, empty strings, nulls) and any generation or rejoins."""
    import stuck as job
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from fleetkit.stuck.columnar import GROUP_ID, expand_group_ids, unpack_small_values

    names = ["c1", "", "3:abc", "-", "a\"b' $(id)", "grüße 🚀", "1:x-2:yy", None]
    words = ["poll_interval", "range", "session"]
    rows = []
    for i in range(64):
        rows.append((names[i % 8], names[(i // 8) % 8] if i % 5 else "kafka", names[(i * 3) % 8],
                     [None, True, False][i % 3], ["Stable", "PreparingRebalance", None, "CompletingRebalance"][i % 4],
                     [None, -1, 0, 2**31 - 1, -2**31, 7][i % 6], [None, 0, 5, 2**31 - 1, -3][i % 5],
                     [None, *words][i % 4], [None, *words][(i // 4) % 4]))
    schema = T.StructType([T.StructField(n, t) for n, t in [
        ("cluster", T.StringType()), ("source", T.StringType()), ("group", T.StringType()),
        ("assigned", T.BooleanType()), ("group_state", T.StringType()), ("generation", T.IntegerType()),
        ("rejoins", T.IntegerType()), ("rejoin_cause", T.StringType()), ("assignor", T.StringType())]])
    df = live.createDataFrame(rows, schema).withColumn("i", F.monotonically_increasing_id())
    handed = df.select("i", job.group_id().alias(GROUP_ID), *job.packed_small_values(job._vocabulary(words)))
    got = unpack_small_values(expand_group_ids(pa.Table.from_pylist([r.asDict() for r in handed.collect()])))
    got = sorted(got.to_pylist(), key=lambda r: r["i"])
    code = {w: n + 1 for n, w in enumerate(words)}
    for r, want in zip(got, rows):
        cluster, source, group, assigned, state, generation, rejoins, cause, assignor = want
        assert (r["cluster"], r["source"], r["group"]) == (cluster, source, group)
        assert (r["assigned"], r["_rebalancing"], r["generation"], r["rejoins"]) == (
            assigned, state in ("PreparingRebalance", "CompletingRebalance"), generation, rejoins), want
        assert (r["_cause"], r["_assignor"]) == (code.get(cause), code.get(assignor)), want
    assert len(got) == len(rows)
