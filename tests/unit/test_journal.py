"""core.journal: durable intent/outcome lines, read back after a crash."""

from __future__ import annotations

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


def test_missing_journal_reads_empty(tmp_path):
    assert read_journal(tmp_path / "none.jsonl") == {}


def test_paths_of_hostile_runs_stay_below_the_root(tmp_path):
    p = journal_path(tmp_path, "trim", "runbook_offsets_trim", "manual__../../etc:x", "lab/../../x")
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
