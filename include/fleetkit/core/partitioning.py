"""Which __consumer_offsets partition (and so which broker) coordinates a consumer group.

partition = Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions, where hashCode is Java's
String.hashCode over UTF-16 code units with 32-bit signed overflow, and Utils.abs(n) is 0 for
Integer.MIN_VALUE, else Math.abs(n) -- NOT n & 0x7fffffff (Utils.toPositive, the producer's partitioner).
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


def partitions_for(groups, partitions: int = 50):
    """partition_for over many groups at once, vectorised with numpy (what the Spark job uses).

    hashCode(s) = sum(s[j] * 31^(n-1-j)) mod 2^32. Groups are bucketed by their length in UTF-16
    code units; each bucket is one contiguous (groups x length) matrix of code units hashed with
    Horner's rule one column at a time (uint32 arithmetic wraps mod 2^32, as Java's int does). No per-character Python loop. Returns an int32 numpy array
    aligned with `groups`.
    """
    import numpy as np

    if partitions <= 0:
        raise ValueError(f"offsets.topic.num.partitions must be positive, got {partitions}")
    groups = groups if isinstance(groups, list) else list(groups)
    n = len(groups)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    lengths = np.fromiter(map(len, groups), dtype=np.int64, count=n)
    encoded = "".join(groups).encode("utf-16-le", "surrogatepass")
    if len(encoded) != 2 * int(lengths.sum()):  # characters outside the BMP are two code units each
        lengths = np.fromiter((len(g) if g.isascii() else len(g.encode("utf-16-le", "surrogatepass")) // 2
                               for g in groups), dtype=np.int64, count=n)
    order = np.argsort(lengths, kind="stable")
    sorted_lengths = lengths[order]
    units = np.frombuffer("".join([groups[i] for i in order]).encode("utf-16-le", "surrogatepass"), dtype="<u2")
    hashes = np.zeros(n, dtype=np.uint32)
    bounds = np.flatnonzero(np.diff(sorted_lengths)) + 1
    first_rows = np.concatenate(([0], bounds))
    last_rows = np.concatenate((bounds, [n]))
    starts = np.concatenate(([0], np.cumsum(sorted_lengths)[:-1]))
    scattered: list[int] = []  # rows of small buckets: hashed together below
    for lo, hi in zip(first_rows.tolist(), last_rows.tolist()):
        length = int(sorted_lengths[lo])
        count = hi - lo
        if not length:
            continue
        if count < 64:
            scattered.extend(range(lo, hi))
            continue
        offset = int(starts[lo])
        columns = units[offset:offset + count * length].reshape(count, length).T
        h = columns[0].astype(np.uint32)
        for c in range(1, length):  # Horner, one code-unit position at a time
            h *= np.uint32(31)
            h += columns[c]
        hashes[order[lo:hi]] = h
    if scattered:
        hashes[order[scattered]] = _weighted_hashes(units, starts[scattered], sorted_lengths[scattered])
    signed = hashes.view(np.int32).astype(np.int64)
    absolute = np.where(signed == INT_MIN, 0, np.abs(signed))  # Kafka's Utils.abs
    return (absolute % partitions).astype(np.int32)


def _weighted_hashes(units, starts, lengths):
    """hashCode of the groups at units[start:start+length], all at once: each code unit times
    31^(distance to its group's end), summed per group (uint32 wraps mod 2^32). Linear in the
    total length whatever the mix of lengths."""
    import numpy as np

    total = int(lengths.sum())
    idx = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths) + np.arange(total)
    ends = np.repeat(np.cumsum(lengths), lengths)
    exponent = ends - 1 - np.arange(total)
    pow31 = np.ones(int(lengths.max()), dtype=np.uint32)
    for k in range(1, len(pow31)):
        pow31[k] = np.uint32((int(pow31[k - 1]) * 31) & 0xFFFFFFFF)
    weighted = units[idx].astype(np.uint32) * pow31[exponent]
    return np.add.reduceat(weighted, np.concatenate(([0], np.cumsum(lengths)[:-1])), dtype=np.uint32)
