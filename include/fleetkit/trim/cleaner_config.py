"""The log cleaner's settings as the brokers report them, and the cleaner fix applied live.

(The collection reads the settings: fleetkit.collection.offsets_topic.cleaner_settings.) Brokers from 1.1 change
log.cleaner.dedupe.buffer.size and log.cleaner.threads without a restart (KIP-226): the fix is
an IncrementalAlterConfigs of each broker's dynamic config (confluent-kafka refuses the
cluster-wide default, the empty broker name), and the broker restarts its cleaner threads with
the new buffer. Older brokers (0.9, 0.10) are fixed by editing
server.properties and restarting each broker (the fleet file's broker_control set_config).
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from fleetkit.core.errors import FleetError
from fleetkit.core.fleet import version_tuple
from fleetkit.trim import cleaner

log = logging.getLogger(__name__)



def fix_mode(kafka_version: str) -> str:
    """"live" (IncrementalAlterConfigs, no restart) from Kafka 1.1, else "restart"."""
    return cleaner.fix_mode(version_tuple(kafka_version))


def _describe(admin, resources: list[ConfigResource], timeout: float) -> dict[str, dict[str, str]]:
    from fleetkit.collection.offsets_topic import _describe as describe

    return describe(admin, resources, timeout)


def _alter(kafka, res: ConfigResource, broker: int, what: str, timeout: float) -> None:
    """One broker's IncrementalAlterConfigs; a refusal is the one-line NotAuthorized (ALTER_CONFIGS
    on the cluster, naming the principal)."""
    try:
        for fut in kafka.admin.incremental_alter_configs([res], request_timeout=timeout).values():
            fut.result(timeout=timeout + 5)
    except KafkaException as e:
        from fleetkit.clients.kafka import error_name

        kafka.raise_refusal(error_name(e), None, "IncrementalAlterConfigs")
        raise FleetError(f"IncrementalAlterConfigs {what} on broker {broker} of cluster {kafka.name!r} failed: "
                         f"{e}") from None


def apply_live(kafka, fix: dict, broker_ids: list[int], timeout: float = 15.0, wait: float = 30.0) -> dict:
    """Set the cleaner keys of `fix` (log.cleaner.dedupe.buffer.size, log.cleaner.threads) as a
    dynamic config of every broker, then read every broker back until each reports them. Returns
    {"before": {broker: {key: value}}, "after": ...}: the values to put back on rollback.
    `kafka` is the cluster's KafkaCluster (the runbook principal's)."""
    admin = kafka.admin
    keys = {k: str(int(v)) for k, v in fix.items() if k in ("log.cleaner.dedupe.buffer.size", "log.cleaner.threads")}
    if not keys:
        raise FleetError(f"nothing to apply in the cleaner fix {fix}")

    def current() -> dict[int, dict[str, str]]:
        got = _describe(admin, [ConfigResource(ResourceType.BROKER, str(b)) for b in broker_ids], timeout)
        return {b: {k: got.get(str(b), {}).get(k) for k in keys} for b in broker_ids}

    before = current()
    for b in broker_ids:
        res = ConfigResource(ResourceType.BROKER, str(b), incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in keys.items()])
        _alter(kafka, res, b, f"setting {keys}", timeout)
    deadline = time.monotonic() + wait
    while True:
        after = current()
        if all(after[b] == keys for b in broker_ids):
            log.info("cleaner settings %s applied live on brokers %s (no restart)", keys, broker_ids)
            return {"before": before, "after": after}
        if time.monotonic() > deadline:
            raise FleetError(f"cleaner settings {keys} set on every broker, but brokers report {after} "
                             f"after {wait:.0f} s")
        time.sleep(0.5)


def revert_live(kafka, before: dict, timeout: float = 15.0, wait: float = 30.0) -> None:
    """Undo apply_live: delete the brokers' dynamic values of the keys it set, so each broker
    falls back to its server.properties value (what `before` shows)."""
    admin = kafka.admin
    for b, vals in sorted(before.items()):
        ops = [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in sorted(vals)]
        res = ConfigResource(ResourceType.BROKER, str(b), incremental_configs=ops)
        _alter(kafka, res, b, f"removing {sorted(vals)}", timeout)
    # KRaft brokers apply a change when they replay it from the metadata log: read back until seen
    deadline = time.monotonic() + wait
    while True:
        got = _describe(admin, [ConfigResource(ResourceType.BROKER, str(b)) for b in before], timeout)
        now = {b: {k: got.get(str(b), {}).get(k) for k in vals} for b, vals in before.items()}
        if now == before:
            return
        if time.monotonic() > deadline:
            raise FleetError(f"cleaner settings rolled back, but brokers report {now} (expected {before}) after "
                             f"{wait:.0f} s")
        time.sleep(0.5)
