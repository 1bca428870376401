"""Datasets: layout, all-or-nothing writes, pruning."""

import datetime as dt
import os

import pyarrow as pa
import pytest

from fleetkit.core.datasets import DataRoot, prune, read_dataset, write_collection

NOW = dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc)


def _snapshot(group="g", committed=5):
    return {"cluster": "c1", "group": group, "topic": "t", "partition": 0, "observed_at": NOW,
            "committed_offset": committed, "log_start_offset": 0, "log_end_offset": 9,
            "group_state": "Stable", "assigned": True, "member_client_id": "c", "member_host": "h"}


def test_write_and_read_back(tmp_path):
    root = DataRoot(tmp_path)
    res = write_collection(root, "c1", NOW, {"offsets_snapshots": [_snapshot(), _snapshot("g2", None)],
                                             "group_coordinators": []})
    path = res.files["offsets_snapshots"]
    assert "/offsets_snapshots/cluster=c1/date=2026-03-04/part-" in path and path.endswith(".parquet")
    rows = read_dataset(root, "offsets_snapshots").to_pylist()
    assert [(r["group"], r["committed_offset"]) for r in rows] == [("g", 5), ("g2", None)]
    assert rows[0]["observed_at"] == NOW
    assert read_dataset(root, "group_coordinators").num_rows == 0
    assert read_dataset(root, "partition_state").num_rows == 0  # never written: empty, typed


def test_failed_collection_leaves_nothing(tmp_path):
    root = DataRoot(tmp_path)
    bad = dict(_snapshot(), partition="not-an-int")  # the second dataset fails to convert
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError)):
        write_collection(root, "c1", NOW, {"group_coordinators": [
            {"cluster": "c1", "group": "g", "observed_at": NOW, "coordinator_id": 1, "error": None,
             "state": "Stable", "members": 1}], "offsets_snapshots": [bad]})
    leftovers = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    assert leftovers == []
    assert read_dataset(root, "group_coordinators").num_rows == 0


def test_readers_skip_temporary_and_hidden_files(tmp_path):
    root = DataRoot(tmp_path)
    write_collection(root, "c1", NOW, {"offsets_snapshots": [_snapshot()]})
    folder = tmp_path / "offsets_snapshots" / "cluster=c1" / "date=2026-03-04"
    (folder / "_tmp-half-written.parquet").write_bytes(b"garbage")
    (folder / ".hidden").write_bytes(b"garbage")
    assert read_dataset(root, "offsets_snapshots").num_rows == 1


def test_prune_keeps_recent_days(tmp_path):
    root = DataRoot(tmp_path)
    for day in (1, 20, 28):
        write_collection(root, "c1", NOW.replace(day=day), {"offsets_snapshots": [_snapshot()]})
    removed = prune(root, "offsets_snapshots", "c1", keep_days=10, today=dt.date(2026, 3, 28))
    assert [os.path.basename(p) for p in removed] == ["date=2026-03-01"]
    assert read_dataset(root, "offsets_snapshots").num_rows == 2


def test_json_state_is_atomic(tmp_path):
    root = DataRoot(tmp_path)
    path = root.join("_state", "cluster=c1", "known_groups.json")
    assert root.read_json(path, default={}) == {}
    root.write_json_atomic(path, {"g": "2026-01-01T00:00:00Z"})
    assert root.read_json(path) == {"g": "2026-01-01T00:00:00Z"}
    assert sorted(os.listdir(tmp_path / "_state" / "cluster=c1")) == ["known_groups.json"]


def test_publish_copy_replaces_whole_and_leaves_nothing_beside(tmp_path):
    from fleetkit.core.datasets import publish_copy

    src, dest = tmp_path / "out.jsonl", tmp_path / "latest" / "out.jsonl"
    dest.parent.mkdir()
    dest.write_text("old\n")
    src.write_text("new 1\nnew 2\n")
    publish_copy(src, dest)
    assert dest.read_text() == "new 1\nnew 2\n"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["out.jsonl"]
    # a copy that fails leaves the published file as it was and no temporary file
    with pytest.raises(FileNotFoundError):
        publish_copy(tmp_path / "missing.jsonl", dest)
    assert dest.read_text() == "new 1\nnew 2\n"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["out.jsonl"]


def test_read_recent_of_no_group_is_no_rows(tmp_path):
    """fleetctl lag --all on a cluster where no group could be seen asks for the history of no
    group: no rows (pyarrow refuses an isin() over an empty, untyped set)."""
    import datetime as _dt

    from fleetkit.core.datasets import DataRoot, read_recent, write_collection

    root = DataRoot(str(tmp_path))
    now = _dt.datetime.now(_dt.timezone.utc)
    write_collection(root, "c", now, {"offsets_snapshots": [
        {"cluster": "c", "group": "g", "topic": "t", "partition": 0, "observed_at": now, "committed_offset": 1}]})
    since = now - _dt.timedelta(hours=1)
    assert read_recent(root, "offsets_snapshots", "c", since, []) == []
    assert len(read_recent(root, "offsets_snapshots", "c", since, ["g"])) == 1


def test_recent_rows_and_the_newest_collection_are_chosen_by_the_time_in_the_file_names(tmp_path):
    """fleetctl lag reads two windows of history, and the metrics the newest collection, from the
    collection time in each file's name: a month of per-minute files is not read to find them."""
    import datetime as _dt

    from fleetkit.core.datasets import DataRoot, file_time, newest_collection, read_recent, write_collection

    root = DataRoot(str(tmp_path))
    now = _dt.datetime(2026, 3, 4, 12, 0, 0, 123456, tzinfo=_dt.timezone.utc)
    written = {}
    for age in (dt.timedelta(days=2), dt.timedelta(hours=3), dt.timedelta(minutes=1), dt.timedelta(0)):
        t = now - age
        written[age] = write_collection(root, "c", t, {"offsets_snapshots": [
            {"cluster": "c", "group": "g", "topic": "t", "partition": 0, "observed_at": t,
             "committed_offset": int(age.total_seconds())}]}).files["offsets_snapshots"]
    assert file_time(written[dt.timedelta(0)]) == now
    rows = read_recent(root, "offsets_snapshots", "c", now - _dt.timedelta(hours=1), ["g"])
    assert sorted(r["committed_offset"] for r in rows) == [0, 60]
    assert newest_collection(root, "offsets_snapshots", "c") == [written[dt.timedelta(0)]]
    assert newest_collection(root, "offsets_snapshots", "other") == []
