"""Kafka's own names and constants the toolkit relies on, in one place."""

from __future__ import annotations

OFFSETS_TOPIC = "__consumer_offsets"
# offsets.topic.num.partitions' default; a cluster's fleet-file entry states its own
DEFAULT_OFFSETS_PARTITIONS = 50

# Group states as the datasets store them (Kafka's names; 0.9's AwaitingSync is stored as
# CompletingRebalance, a group 0.9 has forgotten is Dead)
GROUP_STATES = ("Stable", "Empty", "Dead", "PreparingRebalance", "CompletingRebalance", "Assigning",
                "Reconciling", "Unknown")
# States in which a group is rebalancing: its members hold no settled assignment. AwaitingSync is
# 0.9's name for CompletingRebalance, kept so raw broker answers classify the same. Assigning and
# Reconciling are a KIP-848 consumer group's (Kafka 4): members are moving to a new target assignment.
REBALANCING_STATES = ("PreparingRebalance", "CompletingRebalance", "AwaitingSync", "Assigning", "Reconciling")
# States of a group without live members: Empty (0.10.1+, and KIP-848 groups), Dead (0.9 forgot it,
# or a commit-only group 0.9 never knew)
EMPTY_STATES = ("Empty", "Dead")
# the `assignor` of a KIP-848 consumer group's snapshot rows starts with this (then its server
# assignor: "consumer:uniform"), which tells the storm verdict how to read the group's counters
CONSUMER_PROTOCOL_ASSIGNOR = "consumer:"


def printed_host(host: str | None, source: str | None = "kafka") -> str | None:
    """A group member's host as Kafka's tools print it: '10.0.0.7' -> '/10.0.0.7' (Java's
    InetAddress.toString(), the column kafka-consumer-groups prints and the `member_host` label
    kafka-lag-exporter publishes; the datasets keep the bare address). None and '' stay as they are,
    and so does a ZooKeeper or Storm store's value (no broker reported it)."""
    if not host or (source or "kafka") != "kafka" or host.startswith("/"):
        return host
    return f"/{host}"
