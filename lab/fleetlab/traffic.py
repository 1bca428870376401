"""Realistic traffic for the lab fleet (the demo and the tests).

    python -m fleetlab.traffic --bootstrap 127.0.0.1:29092 [--rate 20] [--lab-dir .lab/lab39]

On a secured lab (--lab-dir of a lab with security "sasl_ssl") it logs in as the lab's `admin`
user, the password read from the lab's secrets.json (never from the command line).

Runs until SIGTERM:
  * a producer writing to `orders`, `payments`, `inventory` and `audit-log`;
  * healthy groups `billing` (orders), `fraud-check` (payments), `ledger` (orders + payments);
  * `inventory-sync`, stuck on a poison record: partition 0 of `inventory` holds a record it cannot
    process, so it seeks back to it forever and never commits past it (alive, offset frozen);
  * `reporting`, a stopped group: it read part of `audit-log`, committed, and its consumers left,
    while `audit-log` keeps growing.

The helpers (produce, commit, a consumer thread) are shared with the tests and benchmarks; each
takes `security`, librdkafka settings merged into its client's (a secured lab's
LabSpec.security_config("admin"); None for an open cluster).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from typing import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from fleetkit.clients.kafka import client_config

log = logging.getLogger(__name__)

KAFKA_VERSION = "0.9.0.1"
POISON = b"POISON: this record cannot be processed"


#: bootstrap servers -> the lab's admin login there (LabSpec.security_config("admin")): the helpers
#: below log in with it when they are given no `security` (register_login; the tests register each
#: lab of theirs, so a helper called with just a secured lab's bootstrap works)
_LOGINS: dict[str, dict] = {}


def register_login(bootstrap: str, security: dict | None) -> None:
    if security:
        _LOGINS[bootstrap] = dict(security)


def login_for(bootstrap: str, security: dict | None) -> dict:
    return security if security is not None else _LOGINS.get(bootstrap, {})


def producer(bootstrap: str, kafka_version: str = KAFKA_VERSION, security: dict | None = None,
             **extra) -> Producer:
    return Producer(client_config({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                   **login_for(bootstrap, security), **extra}, kafka_version))


def consumer(bootstrap: str, group: str, kafka_version: str = KAFKA_VERSION, security: dict | None = None,
             **extra) -> Consumer:
    cfg = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
           "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
           "heartbeat.interval.ms": 1000, "topic.metadata.refresh.interval.ms": 5000,
           **login_for(bootstrap, security)}
    cfg.update(extra)
    return Consumer(client_config(cfg, kafka_version))


def produce(bootstrap: str, topic: str, per_partition: dict[int, int], value: bytes = b"x",
            prod: Producer | None = None, kafka_version: str = KAFKA_VERSION, security: dict | None = None) -> None:
    """Produce exactly per_partition[p] records to each partition p, and wait for them."""
    p = prod or producer(bootstrap, kafka_version, security)
    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, value=value, key=str(i).encode(), partition=part)
            if i % 10000 == 0:
                p.poll(0)
    left = p.flush(60)
    if left:
        raise RuntimeError(f"{left} record(s) to {topic} were not acknowledged in 60s")


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int],
           kafka_version: str = KAFKA_VERSION, security: dict | None = None) -> None:
    """Commit offsets for a group without joining it (a simple commit, as a stopped group leaves them)."""
    c = consumer(bootstrap, group, kafka_version, security)
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def bulk_commits(config: dict, group: str, topic: str, records: int, per_request: int, in_flight: int = 8,
                 metadata: str | None = None, first: int = 1) -> float:
    """Fill __consumer_offsets fast: offset commits of `group` (librdkafka `config` of a lab
    login, its bootstrap servers included) without joining, `per_request` partitions of `topic`
    (0..per_request-1) per commit, request k committing offset k + `first`, until `records` records
    were written; at most `in_flight` commits unanswered; `metadata`: the commit's metadata string
    (a client's own, up to the broker's offset.metadata.max.bytes, 4 KiB by default). Returns the
    seconds it took; a failed commit raises (naming how many failed)."""
    t0 = time.monotonic()
    sent, acked, errors = [0], [0], []

    def on_commit(err, _parts):
        acked[0] += 1
        if err is not None:
            errors.append(err)

    c = Consumer({**config, "group.id": group, "enable.auto.commit": False, "on_commit": on_commit})
    meta = {} if metadata is None else {"metadata": metadata}  # TopicPartition takes no None
    try:
        done = 0
        while done < records:
            n = min(per_request, records - done)
            c.commit(offsets=[TopicPartition(topic, p, sent[0] + first, **meta) for p in range(n)], asynchronous=True)
            done += n
            sent[0] += 1
            while sent[0] - acked[0] > in_flight:
                c.poll(0.001)
        while acked[0] < sent[0]:
            c.poll(0.01)
    finally:
        c.close()
    if errors:
        raise RuntimeError(f"{len(errors)} of {sent[0]} bulk commit(s) of group {group!r} failed, e.g. {errors[0]}")
    return time.monotonic() - t0


def without_leaders(topics: dict, names, partitions: int = 3) -> list[str]:
    """The names among `names` that the metadata's `topics` (list_topics().topics) lack, or hold with
    fewer than `partitions` partitions or a partition without a leader."""
    return [n for n in names if n not in topics or len(topics[n].partitions) < partitions
            or any(p.leader < 0 for p in topics[n].partitions.values())]


def wait_topic(bootstrap: str, topic: str, partitions: int = 3, timeout: float = 30,
               kafka_version: str = KAFKA_VERSION, security: dict | None = None) -> None:
    """Auto-create a topic (0.9 has no CreateTopics) and wait until every partition has a leader."""
    p = producer(bootstrap, kafka_version, security)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            md = p.list_topics(topic, timeout=5)
        except KafkaException:  # 0.9 answers a topic being auto-created with a reply librdkafka rejects
            time.sleep(0.3)
            continue
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) >= partitions and \
                all(pm.leader >= 0 for pm in t.partitions.values()):
            return
        time.sleep(0.3)
    raise RuntimeError(f"topic {topic} has no leaders after {timeout}s")


class ConsumerThread(threading.Thread):
    """A group member that polls, hands each record to `handle` and commits what it processed.

    `handle(msg)` returns True when processed; False means "failed": the consumer seeks back to
    that record and tries again (what a consumer stuck on a poison record does).
    """

    def __init__(self, bootstrap: str, group: str, topics: Iterable[str],
                 handle: Callable | None = None, commit_every: float = 1.0, client_id: str | None = None,
                 stop: threading.Event | None = None, kafka_version: str = KAFKA_VERSION,
                 security: dict | None = None):
        super().__init__(daemon=True, name=f"consumer-{group}")
        extra = {"client.id": client_id} if client_id else {}
        self.consumer = consumer(bootstrap, group, kafka_version, security, **extra)
        self.topics = list(topics)
        self.handle = handle or (lambda msg: True)
        self.commit_every = commit_every
        self.stop_event = stop or threading.Event()
        self.processed = 0
        self.assigned: list[tuple[str, int]] = []

    def _on_assign(self, c, parts):
        self.assigned = [(p.topic, p.partition) for p in parts]

    def run(self) -> None:
        c = self.consumer
        c.subscribe(self.topics, on_assign=self._on_assign)
        pending: dict[tuple[str, int], int] = {}
        last_commit = time.monotonic()
        try:
            while not self.stop_event.is_set():
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None:
                    if self.handle(msg):
                        pending[(msg.topic(), msg.partition())] = msg.offset() + 1
                        self.processed += 1
                    else:
                        c.seek(TopicPartition(msg.topic(), msg.partition(), msg.offset()))
                        time.sleep(0.05)
                elif msg is not None and msg.error().code() != KafkaError._PARTITION_EOF:
                    log.debug("consumer %s: %s", self.name, msg.error())
                if pending and time.monotonic() - last_commit >= self.commit_every:
                    self._commit(pending)
                    pending = {}
                    last_commit = time.monotonic()
            if pending:
                self._commit(pending)
        finally:
            c.close()

    def _commit(self, pending: dict[tuple[str, int], int]) -> None:
        try:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in pending.items()],
                                 asynchronous=False)
        except Exception as e:  # noqa: BLE001 - a commit during a rebalance fails; the next one wins
            log.debug("commit failed: %s", e)

    def stop(self, timeout: float = 15) -> None:
        self.stop_event.set()
        self.join(timeout)


def not_poison(msg) -> bool:
    return msg.value() != POISON


def run(bootstrap: str, rate: float, stop: threading.Event, kafka_version: str = KAFKA_VERSION,
        security: dict | None = None) -> None:
    v, sec = kafka_version, security
    for topic in ("orders", "payments", "inventory", "audit-log"):
        wait_topic(bootstrap, topic, kafka_version=v, security=sec)
    prod = producer(bootstrap, v, sec)

    # the stopped group: read part of audit-log once, commit, leave
    produce(bootstrap, "audit-log", {0: 50, 1: 50, 2: 50}, prod=prod)
    commit(bootstrap, "reporting", {("audit-log", p): 40 for p in range(3)}, v, sec)

    # the poison record, at the current end of inventory-0
    produce(bootstrap, "inventory", {0: 5, 1: 5, 2: 5}, prod=prod)
    prod.produce("inventory", value=POISON, key=b"poison", partition=0)
    prod.flush(30)

    threads = [
        ConsumerThread(bootstrap, "billing", ["orders"], client_id="billing-1", stop=stop, kafka_version=v, security=sec),
        ConsumerThread(bootstrap, "fraud-check", ["payments"], client_id="fraud-check-1", stop=stop, kafka_version=v, security=sec),
        ConsumerThread(bootstrap, "ledger", ["orders", "payments"], client_id="ledger-1", stop=stop, kafka_version=v, security=sec),
        ConsumerThread(bootstrap, "inventory-sync", ["inventory"], handle=not_poison,
                       client_id="inventory-sync-1", stop=stop, kafka_version=v, security=sec),
    ]
    for t in threads:
        t.start()
    log.info("traffic running: %s msg/s per topic", rate)
    n = 0
    while not stop.is_set():
        for topic in ("orders", "payments", "inventory", "audit-log"):
            prod.produce(topic, value=f"{topic}-{n}".encode(), key=str(n).encode())
        n += 1
        prod.poll(0)
        stop.wait(1.0 / rate)
    prod.flush(10)
    for t in threads:
        t.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--kafka-version", default=KAFKA_VERSION, help="the cluster's Kafka version (client settings)")
    ap.add_argument("--rate", type=float, default=20.0, help="records per second per topic")
    ap.add_argument("--lab-marker", help="the lab folder (lets the lab find this process by PID file)")
    ap.add_argument("--lab-dir", help="a secured lab's folder: log in as its admin user (secrets.json)")
    args = ap.parse_args(argv)
    security = None
    if args.lab_dir:
        from fleetlab.lab import LabSpec

        security = LabSpec.load(args.lab_dir).security_config("admin") or None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    run(args.bootstrap, args.rate, stop, args.kafka_version, security)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
