"""The Lab's topics: creating them and setting their configs on every generation (the Admin API
on 3.x / 4.x, ZooKeeper's znodes on 0.9), and __consumer_offsets made ready before a test reads it
(a part of fleetlab.lab.Lab)."""

from __future__ import annotations

import json
import logging
import re


from fleetkit.core.kafka_names import DEFAULT_OFFSETS_PARTITIONS as OFFSETS_PARTITIONS
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.errors import LabError

log = logging.getLogger(__name__)
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


class LabTopics:
    """The Lab's topic steps (mixed into fleetlab.lab.Lab)."""

    def create_topic(self, topic: str, partitions: int = 3, replication: int = 1, config: dict | None = None,
                     zk=None) -> bool:
        """Create a topic; False if it exists. 3.x/4.x: the Admin API's CreateTopics. 0.9 has no
        CreateTopics request: there the lab does what AdminUtils.createTopic does (config znode,
        then the assignment znode the controller acts on)."""
        if not TOPIC_NAME.fullmatch(topic):
            raise LabError(f"{topic!r} is not a legal topic name (1-249 of ASCII letters, digits, '.', '_', '-')")
        if self.spec.modern:
            return self._create_topic_admin(topic, partitions, replication, config)
        own = zk is None
        zk = zk or self.zk_client()
        try:
            if zk.exists(f"/brokers/topics/{topic}"):
                return False
            n = self.spec.brokers
            assignment = {str(p): [(p + r) % n for r in range(min(replication, n))] for p in range(partitions)}
            zk.ensure_path("/config/topics")
            if not zk.exists(f"/config/topics/{topic}"):
                zk.create(f"/config/topics/{topic}", json.dumps(
                    {"version": 1, "config": {k: str(v) for k, v in (config or {}).items()}}).encode())
            zk.ensure_path("/brokers/topics")
            zk.create(f"/brokers/topics/{topic}", json.dumps({"version": 1, "partitions": assignment}).encode())
            return True
        finally:
            if own:
                zk.stop()
                zk.close()

    def set_topic_config(self, topic: str, config: dict, zk=None) -> None:
        """Merge topic configs. 3.x/4.x: IncrementalAlterConfigs. 0.9: what `kafka.admin.ConfigCommand
        --entity-type topics --alter --add-config` does: merge into /config/topics/<topic>, then
        announce it under /config/changes so brokers apply it."""
        if self.spec.modern:
            return self._alter_topic_config_admin(topic, config)
        own = zk is None
        zk = zk or self.zk_client()
        try:
            path = f"/config/topics/{topic}"
            zk.ensure_path("/config/topics")
            current = {"version": 1, "config": {}}
            if zk.exists(path):
                current = json.loads(zk.get(path)[0] or b"{}") or current
            merged = dict(current.get("config", {}), **{k: str(v) for k, v in config.items()})
            if merged == current.get("config"):
                return
            doc = json.dumps({"version": 1, "config": merged}).encode()
            if zk.exists(path):
                zk.set(path, doc)
            else:
                zk.create(path, doc)
            zk.ensure_path("/config/changes")
            zk.create("/config/changes/config_change_", json.dumps(
                {"version": 1, "entity_type": "topics", "entity_name": topic}).encode(), sequence=True)
        finally:
            if own:
                zk.stop()
                zk.close()

    def _create_topic_admin(self, topic: str, partitions: int, replication: int, config: dict | None) -> bool:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        admin = self.admin()  # keep the handle alive until the answer
        fut = admin.create_topics([NewTopic(topic, partitions, min(replication, self.spec.brokers),
                                                   config={k: str(v) for k, v in (config or {}).items()})],
                                         operation_timeout=30)[topic]
        try:
            fut.result(timeout=60)
            return True
        except KafkaException as e:
            if e.args and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise LabError(f"creating topic {topic!r} on {self.spec.name} failed: {e}") from None

    def _alter_topic_config_admin(self, topic: str, config: dict) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in config.items()])
        admin = self.admin()
        for fut in admin.incremental_alter_configs([resource]).values():
            fut.result(timeout=60)

    def _ensure_offsets_topic_admin(self) -> None:
        """3.x/4.x create __consumer_offsets (offsets.topic.* settings) at the first FindCoordinator
        once enough brokers are up; ask for a coordinator, then wait for every leader and full ISR."""
        from fleetkit.clients import wire

        from fleetkit.clients.wire_security import Security

        rf = min(3, self.spec.brokers)
        admin = self.admin()
        security = Security.from_config(self.spec.security_config("admin")) if self.spec.secured else None

        def all_led() -> bool:
            try:  # a coordinator lookup on the wire: no librdkafka handle with requests left behind
                wire.probe(self.spec.bootstrap, ["fleetlab-warmup"], timeout=5, security=security)
            except Exception:  # noqa: BLE001 - "coordinator not available" until the topic exists
                pass
            md = admin.list_topics(OFFSETS_TOPIC, timeout=5).topics.get(OFFSETS_TOPIC)
            if md is None or md.error is not None or len(md.partitions) < OFFSETS_PARTITIONS:
                return False
            return all(p.leader >= 0 and len(p.isrs) >= rf for p in md.partitions.values())

        self._wait(f"{OFFSETS_TOPIC} leaders and ISR", all_led, 90)

    def _ensure_offsets_topic(self) -> None:
        """0.9 creates __consumer_offsets with min(replication factor, live brokers) replicas on first
        use; create it up front with every broker as a replica."""
        zk = self.zk_client()
        try:
            rf = min(3, self.spec.brokers)
            if self.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, rf,
                                 {"cleanup.policy": "compact", "compression.type": "uncompressed",
                                  "segment.bytes": self.spec.offsets_segment_bytes}, zk=zk):
                log.info("created %s with %d partitions x %d replicas", OFFSETS_TOPIC, OFFSETS_PARTITIONS, rf)
            # if a client made the broker create it first (100 MiB segments), the override still applies
            self.set_topic_config(OFFSETS_TOPIC, {"cleanup.policy": "compact",
                                                  "segment.bytes": self.spec.offsets_segment_bytes}, zk=zk)

            def all_led() -> bool:
                for p in range(OFFSETS_PARTITIONS):
                    path = f"/brokers/topics/{OFFSETS_TOPIC}/partitions/{p}/state"
                    if not zk.exists(path):
                        return False
                    state = json.loads(zk.get(path)[0])
                    if state["leader"] < 0 or len(state["isr"]) < rf:
                        return False
                return True

            self._wait(f"{OFFSETS_TOPIC} leaders and ISR", all_led, 90)
        finally:
            zk.stop()
            zk.close()
