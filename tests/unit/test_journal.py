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
