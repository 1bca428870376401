"""The log cleaner's capacity, as Kafka's LogCleaner computes it.

Each cleaner thread gets min(log.cleaner.dedupe.buffer.size / log.cleaner.threads, Int.MaxValue)
bytes of offset map; an entry costs 24 bytes (16-byte MD5 + 8-byte offset); one pass stops at
slots x log.cleaner.io.buffer.load.factor keys. Before KAFKA-3894 (fixed in 0.10.1), a segment
holding more messages than one pass maps kills the cleaner thread for good.
"""

from __future__ import annotations

INT_MAX = 2**31 - 1
BYTES_PER_ENTRY = 16 + 8  # MD5 hash + offset
MIN_BUFFER_PER_THREAD = 1024 * 1024  # 0.9 rejects 1 MiB per thread or less at start-up
#: brokers from 1.1 change the cleaner settings without a restart (KIP-226)
LIVE_CLEANER_CONFIG_SINCE = (1, 1)


def fix_mode(version: tuple[int, ...]) -> str:
    """How a cleaner fix is applied: "live" (IncrementalAlterConfigs of the cluster default, no
    restart) from Kafka 1.1, "restart" (server.properties, then a broker restart) before."""
    return "live" if tuple(version) >= LIVE_CLEANER_CONFIG_SINCE else "restart"


def capacity(dedupe_buffer_size: int, threads: int = 1, load_factor: float = 0.9) -> dict:
    if dedupe_buffer_size <= 0:
        raise ValueError(f"dedupe buffer size must be positive, got {dedupe_buffer_size}")
    if threads <= 0:
        raise ValueError(f"cleaner threads must be positive, got {threads}")
    if not 0 < load_factor <= 1:
        raise ValueError(f"load factor must be in (0, 1], got {load_factor}")
    per_thread = min(dedupe_buffer_size // threads, INT_MAX)
    slots = per_thread // BYTES_PER_ENTRY
    return {"dedupe_buffer_size": dedupe_buffer_size, "threads": threads, "load_factor": load_factor,
            "bytes_per_thread": per_thread, "capped_at_2gib": dedupe_buffer_size // threads > INT_MAX,
            "slots": slots, "keys_per_pass": int(slots * load_factor)}


def buffer_for(messages: int, threads: int = 1, load_factor: float = 0.9, headroom: float = 1.25) -> int:
    """The smallest dedupe buffer (bytes, rounded up to MiB) whose pass maps `messages` x headroom keys."""
    import math

    slots = math.ceil(messages * headroom / load_factor)
    per_thread = max(slots * BYTES_PER_ENTRY, MIN_BUFFER_PER_THREAD + 1)
    if per_thread > INT_MAX:
        raise ValueError(f"{messages} messages per segment exceed what one cleaner thread can ever map "
                         f"({int(INT_MAX // BYTES_PER_ENTRY * load_factor)} keys): shrink segment.bytes")
    mib = 1024 * 1024
    return math.ceil(per_thread * threads / mib) * mib
