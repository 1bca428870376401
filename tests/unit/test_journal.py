"""core.journal: durable intent/outcome lines, read back after a crash."""

from __future__ import annotations

import pytest

from fleetkit.core.journal import Journal, journal_path, read_journal, summary


def test_intent_then_outcome_and_a_torn_tail(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path) as j:
        j.intent(0, path="/a")
        j.outcome(0)
        j.intent(1, path="/b")
        j.intent(3, path="/c")
        j.outcome(3, "failed", error="refused")
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"seq": 2, "status": "do')  # the writer was killed mid-line
    entries = read_journal(path)
    assert {k: e["status"] for k, e in entries.items()} == {0: "done", 1: "intent", 3: "failed"}
    s = summary(path)
    assert s["counts"] == {"done": 1, "intent": 1, "failed": 1}
    assert [(e["path"], e["error"]) for e in s["other"]] == [("/c", "refused")]
    assert [e["path"] for e in s["done"]] == ["/a"] and [e["path"] for e in s["unknown"]] == ["/b"]


def test_missing_journal_reads_empty(state_store, tmp_path):
    from fleetkit.core.journal import exists

    assert read_journal(tmp_path / "none.jsonl") == {} and not exists(tmp_path / "none.jsonl")


def test_entries_read_back_in_order_from_each_store(state_store, tmp_path):
    """The same entries, in the order written, whichever store keeps them (files, PostgreSQL); a
    journal is keyed by its path (two journals apart), and a name holding NUL is kept as written."""
    from fleetkit.core.journal import exists

    path, other = tmp_path / "journals" / "j.jsonl", tmp_path / "journals" / "k.jsonl"
    with Journal(path) as j:
        j.intent(0, path="/a\x00b")
        j.write([{"seq": 1, "status": "intent", "path": "/b"}, {"seq": 2, "status": "intent", "path": "/c"}])
        j.outcome(1, "failed", error="refused")
    with Journal(other) as j:
        j.intent(0, path="/z")
    with Journal(str(path)) as j:  # the same journal, however its path is written
        j.outcome(0)
    entries = read_journal(path)
    assert [(k, e["status"]) for k, e in entries.items()] == [(0, "done"), (1, "failed"), (2, "intent")]
    assert entries[0]["path"] == "/a\x00b" and read_journal(str(other))[0]["path"] == "/z"
    assert summary(path)["counts"] == {"done": 1, "failed": 1, "intent": 1}
    assert exists(path) and exists(other) and not exists(tmp_path / "journals" / "none.jsonl")


def test_a_journal_under_an_object_store_data_root_needs_the_shared_state(state_store):
    """No append, no fsync on an object store: the local-files store refuses a journal there (one
    line naming the setting); a database keeps it, keyed by its path."""
    from fleetkit.core.errors import FleetConfigError

    if not state_store.shared:
        with pytest.raises(FleetConfigError, match="FLEET_STATE_CONN_ID"):
            journal_path("s3://bucket/fleet", "trim", "d", "r", "c1")
        return
    p = journal_path("s3://bucket/fleet", "trim", "d", "r", "c1")
    with Journal(p) as j:
        j.intent(0, path="/a")
    assert read_journal(journal_path("s3://bucket/fleet", "trim", "d", "r", "c1"))[0]["status"] == "intent"


def test_paths_of_hostile_runs_stay_below_the_root(tmp_path):
    p = journal_path(tmp_path, "trim", "runbook_trim", "manual__../../etc:x", "lab/../../x")
    assert p.resolve().is_relative_to((tmp_path / "journals").resolve())


def test_the_first_line_after_a_crash_is_kept(tmp_path):
    """A writer killed mid-line leaves a torn tail; the next writer's first line (a move's intent
    with its checksum) must not be glued onto it and lost."""
    path = tmp_path / "j.jsonl"
    with Journal(path) as j:
        j.intent(0, path="/a")
        j.outcome(0)
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"at": "2026-03-01T00:00:00Z", "seq": 1, "status": "inte')  # killed mid-write
    with Journal(path) as j:
        j.intent(1, path="/b", checksum="sha256:abc")
    entries = read_journal(path)
    assert entries[1]["status"] == "intent" and entries[1]["checksum"] == "sha256:abc"
    assert entries[0]["status"] == "done"
    assert path.read_text(encoding="utf-8").endswith("\n")
    assert all(line.startswith("{") and line.endswith("}") for line in path.read_text().splitlines())
    (torn,) = tmp_path.glob("j.jsonl.torn-*")
    assert torn.read_text() == '{"at": "2026-03-01T00:00:00Z", "seq": 1, "status": "inte'


def test_a_torn_line_glued_to_a_whole_one_by_an_earlier_version_still_yields_the_whole_one(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text('{"at": "t0", "seq": 0, "status": "done"}\n'
                    '{"at": "t1", "seq": 1, "details": {"n": 1}, "status": "inte'
                    '{"at": "t2", "checksum": "sha256:abc", "seq": 1, "status": "intent"}\n'
                    '{"at": "t3", "seq": 2, "status": "done"}\n', encoding="utf-8")
    entries = read_journal(path)
    assert entries[1]["checksum"] == "sha256:abc" and entries[2]["status"] == "done"


def test_a_whole_tail_is_left_alone(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path) as j:
        j.intent(0, path="/a")
    with Journal(path) as j:
        j.outcome(0)
    assert read_journal(path)[0]["status"] == "done"
    assert list(tmp_path.glob("*.torn-*")) == []


def test_creating_a_journal_fsyncs_its_folder(tmp_path, monkeypatch):
    from tests.helpers import fsync_spy

    synced = fsync_spy(monkeypatch)
    folder = tmp_path / "journals" / "run"
    with Journal(folder / "j.jsonl") as j:
        j.intent(0, path="/a")
    assert str(folder) in synced
    synced.clear()
    with Journal(folder / "j.jsonl") as j:  # opening an existing journal: its folder did not change
        j.outcome(0)
    assert str(folder) not in synced
