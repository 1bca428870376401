"""Verifying an offset reset: the committed offsets read back equal the planned ones."""

from __future__ import annotations

from fleetkit.clients.kafka import KafkaCluster


def verify(kafka: KafkaCluster, plan: dict) -> list[str]:
    d = plan["details"]
    now = kafka.group_offsets(d["group"], [(d["topic"], r["partition"]) for r in d["partitions"]])
    return [f"{d['topic']}-{r['partition']}: expected {r['new']}, reads back {now.get((d['topic'], r['partition']))}"
            for r in d["partitions"] if now.get((d["topic"], r["partition"])) != r["new"]]
