"""Which __consumer_offsets partition (and so which broker) coordinates a consumer group.

partition = Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions, where hashCode is Java's
String.hashCode over UTF-16 code units with 32-bit signed overflow, and Utils.abs(n) is 0 for
Integer.MIN_VALUE, else Math.abs(n) -- NOT n & 0x7fffffff (kafka-facts.md).
"""

from __future__ import annotations

INT_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode(): s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: 0 for Integer.MIN_VALUE, else Math.abs."""
    return 0 if n == INT_MIN else abs(n)


def partition_for(group: str, partitions: int = 50) -> int:
    if partitions <= 0:
        raise ValueError(f"offsets.topic.num.partitions must be positive, got {partitions}")
    return kafka_abs(java_string_hash(group)) % partitions
