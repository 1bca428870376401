"""fleetkit.core.datasets' one way to the data root on a local folder: DataPath's pathlib calls,
whole-file publishing, newest_in_runs, the URI-safe joins of core.settings, and what
ObjectStoreOptions shows of its keys. The object store itself is tests/integration/test_object_store_root.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetkit.core import datasets, settings
from fleetkit.core.datasets import DataPath, ObjectStoreOptions, as_path, data_path, newest_in_runs


def test_a_local_data_path_behaves_as_pathlib(tmp_path):
    root = datasets.DataRoot(tmp_path / "data")
    p = root / "reports" / "stuck" / "run-1" / "groups.jsonl"
    assert isinstance(p, DataPath) and p.local and str(p) == str(tmp_path / "data/reports/stuck/run-1/groups.jsonl")
    assert os.fspath(p) == str(p) and p.name == "groups.jsonl" and p.parent.name == "run-1"
    assert p.with_name("findings.jsonl").name == "findings.jsonl" and p.suffix == ".jsonl"
    assert not p.exists()
    datasets.publish_rows([{"g": "a"}, {"g": "ĝ"}], p)
    assert p.is_file() and p.parent.is_dir() and datasets.read_jsonl(p) == [{"g": "a"}, {"g": "ĝ"}]
    assert datasets.read_jsonl(str(p)) == datasets.read_jsonl(Path(str(p)))
    assert p.stat().st_size == len(p.read_bytes())
    assert [c.name for c in (root / "reports").glob("*/*/groups.jsonl")] == ["groups.jsonl"]
    assert sorted(os.listdir(p.parent)) == ["groups.jsonl"]  # no temporary file left beside it
    p.parent.mark_done()  # a local folder needs no marker
    assert not (p.parent / "_SUCCESS").exists() and p.parent.done()
    (root / "reports").rmtree()
    assert not (root / "reports").exists()


def test_a_failed_publish_keeps_the_old_file(tmp_path):
    dest = data_path(tmp_path / "latest.jsonl")
    datasets.publish_rows([{"v": 1}], dest)

    def rows():
        yield {"v": 2}
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        datasets.publish_rows(rows(), dest)
    assert datasets.read_jsonl(dest) == [{"v": 1}] and sorted(os.listdir(tmp_path)) == ["latest.jsonl"]


def test_newest_in_runs_on_a_local_folder_takes_the_newest_run(tmp_path):
    base = tmp_path / "reports" / "offsets"
    for run, mtime in (("a", 100), ("b", 300), ("c", 200)):
        (base / run).mkdir(parents=True)
        (base / run / "health.jsonl").write_text("{}\n")
        os.utime(base / run / "health.jsonl", (mtime, mtime))
    assert settings.newest_in_runs(base, "health.jsonl") == base / "b" / "health.jsonl"  # a Path, as before
    (base / "_tmp-x").mkdir()  # what an interrupted writer leaves: never a run
    (base / "_tmp-x" / "health.jsonl").write_text("{}\n")
    assert newest_in_runs(data_path(base), "health.jsonl").parent.name == "b"
    assert newest_in_runs(data_path(tmp_path / "none"), "health.jsonl") is None


def test_paths_under_a_uri_keep_its_double_slash():
    assert settings.under_root("s3://bucket/fleet", "plans") == "s3://bucket/fleet/plans"
    assert settings.plans_root("s3://bucket/fleet") == "s3://bucket/fleet/plans"
    assert settings.run_folder("s3://bucket/fleet/reports", "stuck", "manual__1:2") == \
        "s3://bucket/fleet/reports/stuck/manual__1~3A2"
    assert settings.under_root("/srv/fleet", "plans") == "/srv/fleet/plans"
    assert isinstance(as_path("/srv/fleet"), Path)


def test_a_trim_on_an_object_store_root_needs_a_local_quarantine(monkeypatch):
    monkeypatch.delenv("FLEET_QUARANTINE_DIR", raising=False)
    with pytest.raises(settings.MissingSetting, match="FLEET_QUARANTINE_DIR is not set .*s3://b/x is an object store"):
        settings.quarantine_root("s3://b/x")
    monkeypatch.setenv("FLEET_QUARANTINE_DIR", "/srv/quarantine")
    assert settings.quarantine_root("s3://b/x") == Path("/srv/quarantine")


def test_object_store_options_never_show_their_keys():
    o = ObjectStoreOptions("http://127.0.0.1:9", "eu-west-1", "AKIDEXAMPLE123", "s3cr3t-value-0123456789",
                           source="connection 'fleet_data_root'")
    assert "AKIDEXAMPLE123" not in repr(o) and "s3cr3t" not in repr(o)
    env = o.child_env()
    assert env["AWS_ACCESS_KEY_ID"] == "AKIDEXAMPLE123" and env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
    assert env["AWS_REQUEST_CHECKSUM_CALCULATION"] == "WHEN_REQUIRED"
    back = ObjectStoreOptions.from_env(env)
    assert back.key() == o.key() and back.source == o.source
    assert o.redact("denied for s3cr3t-value-0123456789") == "denied for ***"
