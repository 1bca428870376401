"""Whether the saved positions of __consumer_offsets are of the log read before (log_marks)."""

from __future__ import annotations

from fleetkit.collection import log_marks
from fleetkit.core.datasets import DataRoot

MARK = {"offset": 99, "sha256": log_marks.fingerprint(b"key", b"value")}


def test_fingerprints_tell_records_apart():
    f = log_marks.fingerprint
    assert f(b"key", b"value") == MARK["sha256"]
    assert len({f(b"key", b"value"), f(b"keyv", b"alue"), f(b"key", None), f(None, b"key"), f(b"", b"")}) == 5


def test_a_saved_position_of_another_log_is_named():
    c = log_marks.changed
    saved = {0: 100}
    assert c({0: MARK}, saved, {0: 150}, {0: MARK["sha256"]}) == {}  # the same record at the mark
    assert "not the one read before" in c({0: MARK}, saved, {0: 150}, {0: "other"})[0]
    assert "truncated or re-created" in c({0: MARK}, saved, {0: 99}, {})[0]  # the log ends at the mark
    # no record at the mark (compacted away, below the log start, a marker): not verifiable, kept
    assert c({0: MARK}, saved, {0: 150}, {}) == {}
    assert c({0: MARK}, {}, {0: 150}, {0: "other"}) == {}  # no saved position: read from the start anyway
    assert c({0: {**MARK, "offset": 100}}, saved, {0: 150}, {0: "other"}) == {}  # not a mark of this position


def test_the_state_round_trips(tmp_path):
    root = DataRoot(tmp_path)
    assert log_marks.load(root, "c") == {"marks": {}, "superseded_before": {}}
    log_marks.save(root, "c", {"marks": {3: MARK}, "superseded_before": {7: "2026-11-27T00:00:00+00:00"}})
    assert log_marks.load(root, "c") == {"marks": {3: MARK}, "superseded_before": {7: "2026-11-27T00:00:00+00:00"}}
    assert log_marks.superseded_before(root, "c") == {7: "2026-11-27T00:00:00+00:00"}
    assert log_marks.load(root, "other") == {"marks": {}, "superseded_before": {}}
