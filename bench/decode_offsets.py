"""Benchmark: decoding __consumer_offsets records (target: >= 300,000 records/s on 2 cores).

    .venv/bin/python bench/decode_offsets.py [--records 1000000]

Builds 1M real-format records (Kafka 0.9's key v1 / value v1 offset commits, 1 in 50 a group
metadata record, 1 in 100 a tombstone) and decodes them all in one process; prints records/s and
peak memory.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from fleetkit.clients.offsets_codec import decode, encode_group_key, encode_offset_key, encode_offset_value_v1  # noqa: E402
import struct  # noqa: E402


def group_value(i: int) -> bytes:
    s = lambda t: struct.pack(">h", len(t)) + t.encode()  # noqa: E731
    member = s(f"client-{i}-uuid") + s(f"client-{i}") + s("/10.0.0.7") + struct.pack(">i", 10000) + \
        struct.pack(">i", 20) + b"x" * 20 + struct.pack(">i", 30) + b"y" * 30
    return struct.pack(">h", 0) + s("consumer") + struct.pack(">i", i) + s("range") + s(f"client-{i}-uuid") + \
        struct.pack(">i", 1) + member


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    records = []
    for i in range(args.records):
        g = f"group-{i % 5000}"
        if i % 100 == 0:
            records.append((encode_offset_key(g, f"topic-{i % 300}", i % 12), None))
        elif i % 50 == 0:
            records.append((encode_group_key(g), group_value(i)))
        else:
            records.append((encode_offset_key(g, f"topic-{i % 300}", i % 12),
                            encode_offset_value_v1(i, "", 1_700_000_000_000 + i, 1_700_086_400_000 + i)))
    t = time.perf_counter()
    n = 0
    for k, v in records:
        decode(k, v)
        n += 1
    dt = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rate = n / dt
    print(f"RESULT decoded {n:,} records in {dt:.2f}s = {rate:,.0f} records/s, peak RSS {peak:.0f} MB "
          f"(target >= 300,000/s: {'MET' if rate >= 300_000 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
