"""KafkaCluster.log_offsets asks once more for partitions librdkafka does not know yet (a topic created
moments ago, __consumer_offsets at a cluster's first group, is missing from its metadata cache), and
reports a partition that stays unknown. Against a fake AdminClient: the race cannot be forced on a
real cluster."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException

from fleetkit.clients import kafka as kafka_mod


class _Admin:
    def __init__(self, unknown_rounds: dict):
        self.unknown_rounds = dict(unknown_rounds)  # partition -> how many rounds it stays unknown
        self.asked: list[list] = []

    def poll(self, timeout):
        return 0

    def list_offsets(self, req, request_timeout):
        self.asked.append(sorted((tp.topic, tp.partition) for tp in req))
        out = {}
        for tp in req:
            f: Future = Future()
            key = (tp.topic, tp.partition)
            if self.unknown_rounds.get(key, 0) > 0:
                f.set_exception(KafkaException(KafkaError(KafkaError._NOENT)))
            else:
                # log_offsets asks the log starts, then the log ends
                f.set_result(SimpleNamespace(offset=0 if len(self.asked) % 2 else 42))
            out[tp] = f
        return out

    def finish_round(self):
        for k in self.unknown_rounds:
            self.unknown_rounds[k] -= 1


def _cluster(admin, monkeypatch):
    c = kafka_mod.KafkaCluster("c1", {"bootstrap.servers": "127.0.0.1:1"})
    c._admin = admin
    monkeypatch.setattr(c, "refused_topics", lambda topics: {})
    monkeypatch.setattr(kafka_mod.time, "sleep", lambda s: admin.finish_round())
    return c


def test_a_partition_unknown_at_first_is_asked_once_more(monkeypatch):
    admin = _Admin({("__consumer_offsets", 0): 1})
    c = _cluster(admin, monkeypatch)
    got = c.log_offsets([("__consumer_offsets", 0), ("__consumer_offsets", 1)])
    assert got == {("__consumer_offsets", 0): (0, 42, None), ("__consumer_offsets", 1): (0, 42, None)}
    assert admin.asked[2:] == [[("__consumer_offsets", 0)]] * 2  # only the unknown one, start and end


def test_a_partition_that_stays_unknown_is_reported(monkeypatch):
    admin = _Admin({("t", 9): 5})
    c = _cluster(admin, monkeypatch)
    assert c.log_offsets([("t", 9)]) == {("t", 9): (None, None, "_NOENT")}
    assert len(admin.asked) == 4  # two kinds, asked twice: never more
