"""The wire probe against the real brokers: the versions it chooses per broker and the answers."""

from __future__ import annotations

import time

import pytest

from fleetkit.clients import wire
from fleetkit.core.partitioning import partition_for
from fleetlab.traffic import ConsumerThread, commit, produce, wait_topic

from tests.helpers import committed_offsets, wait_until


def test_09_cannot_answer_api_versions_and_is_spoken_to_in_version_0(lab, unique):
    first = lab.bootstrap.split(",")[0]
    t = time.monotonic()
    assert wire.broker_versions(first, timeout=10) is None
    assert time.monotonic() - t < wire.API_VERSIONS_TIMEOUT + 2  # 0.9 stays silent: the wait is bounded

    topic, live, stopped = unique("wire"), unique("wire live ĝ {{x}}"), unique("wire stopped; rm -rf /")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 1, 1: 1, 2: 1})
    commit(lab.bootstrap, stopped, {(topic, 0): 1})
    member = ConsumerThread(lab.bootstrap, live, [topic], client_id="wire-client")
    member.start()
    try:
        wait_until(lambda: committed_offsets(lab.bootstrap, live, topic) == {0: 1, 1: 1, 2: 1}, 60, "live group caught up")
        known = wire.probe(lab.bootstrap, [live, stopped], timeout=10, api_versions=False)
        asked = wire.probe(lab.bootstrap, [live, stopped], timeout=10)
    finally:
        member.stop()
    with lab.zookeeper() as zk:
        states = {s.partition: s.leader for s in zk.partition_states(["__consumer_offsets"])[0]}
    for answers in (known, asked):
        for g in (live, stopped):
            assert answers[g].error is None
            assert answers[g].coordinator_id == states[partition_for(g, 50)]
        assert answers[live].state == "Stable"
        assert [(c, h) for _, c, h in answers[live].members] == [("wire-client", "/127.0.0.1")]
        assert (answers[stopped].state, answers[stopped].members) == ("Dead", [])  # 0.9 forgets member-less groups
