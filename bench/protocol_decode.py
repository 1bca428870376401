"""Benchmark: decoding the answers the toolkit reads most, through the protocol layer's declared
messages (fleetkit.clients.protocol), beside another checkout's decoders (--baseline CHECKOUT,
e.g. the hand-written ones before the declarations).

Answers, built once in Kafka's wire format: DescribeGroups v5 of 2,000 groups with 3 members each
(their assignments decoded), FindCoordinator v4 of 500 groups, Fetch v11 of one partition holding
8 MiB of record bytes (the records are parsed elsewhere: this is the answer around them). Prints
the best of --repeat runs per answer and checkout.

    .venv/bin/python bench/protocol_decode.py [--baseline /path/to/other/checkout] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _s(text: str) -> bytes:  # a compact (flexible) string
    b = text.encode()
    return bytes([len(b) + 1]) + b


def _c(n: int) -> bytes:  # a compact array's length
    return bytes([n + 1]) if n < 127 else bytes([((n + 1) & 0x7F) | 0x80, (n + 1) >> 7])


def answers() -> dict[str, tuple[int, bytes, list[str]]]:
    """name -> (version, response without its size, the keys asked)."""
    assignment = struct.pack(">hi", 0, 1) + struct.pack(">h", 6) + b"orders" + struct.pack(">iiiii", 3, 0, 1, 2, -1)
    members = b"".join(_s(f"consumer-{j}-0123456789abcdef") + b"\x00" + _s(f"client-{j}") + _s("/10.0.0.7")
                       + _c(3) + b"abc" + _c(len(assignment)) + assignment + b"\x00" for j in range(3))
    groups = b"".join(struct.pack(">h", 0) + _s(f"group-{i}") + _s("Stable") + _s("consumer") + _s("range") + _c(3)
                      + members + struct.pack(">i", -2147483648) + b"\x00" for i in range(2000))
    describe = struct.pack(">i", 0) + b"\x00" + struct.pack(">i", 0) + _c(2000) + groups + b"\x00"
    keys = [f"group-{i}" for i in range(500)]
    coords = b"".join(_s(k) + struct.pack(">i", 1) + _s("broker-1.example") + struct.pack(">ih", 9092, 0) + b"\x00"
                      + b"\x00" for k in keys)
    find = struct.pack(">i", 0) + b"\x00" + struct.pack(">i", 0) + _c(500) + coords + b"\x00"
    records = b"\x00" * (8 * 1024 * 1024)
    fetch = (struct.pack(">iihi", 0, 0, 0, 0) + struct.pack(">i", 1) + struct.pack(">h", 18) + b"__consumer_offsets"
             + struct.pack(">i", 1) + struct.pack(">ihqqq", 7, 0, 10_000, 10_000, 0) + struct.pack(">i", -1)
             + struct.pack(">i", -1) + struct.pack(">i", len(records)) + records)
    return {"DescribeGroups v5, 2,000 groups x 3 members": (5, describe, []),
            "FindCoordinator v4, 500 groups": (4, find, keys),
            "Fetch v11, one partition of 8 MiB": (11, fetch, [])}


def measure(include: str, repeat: int) -> dict[str, float]:
    """In this process: the decoders of the checkout whose include/ folder comes first on sys.path."""
    import time

    sys.path.insert(0, include)
    from fleetkit.clients import wire, wire_logs

    if hasattr(wire, "described_groups"):  # the declared messages
        from fleetkit.clients.protocol import messages as m

        decode = {"DescribeGroups": lambda v, p, k: wire.described_groups(m.DESCRIBE_GROUPS.decode_response(v, p)[1]),
                  "FindCoordinator": lambda v, p, k: wire.coordinators(v, m.FIND_COORDINATOR.decode_response(v, p)[1], k),
                  "Fetch": lambda v, p, k: wire_logs.fetched(m.FETCH.decode_response(v, p)[1])}
    else:  # the hand-written decoders
        decode = {"DescribeGroups": lambda v, p, k: wire.decode_describe_groups(v, p)[1],
                  "FindCoordinator": lambda v, p, k: wire.decode_find_coordinator(v, p, k)[1],
                  "Fetch": lambda v, p, k: wire_logs.decode_fetch(v, p)}
    out = {}
    for name, (version, payload, keys) in answers().items():
        fn = decode[name.split()[0]]
        got = fn(version, payload, keys)
        assert len(got) == {"DescribeGroups": 2000, "FindCoordinator": 500, "Fetch": 1}[name.split()[0]], name
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn(version, payload, keys)
            best = min(best, time.perf_counter() - t0)
        out[name] = best
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, help="another checkout, measured the same way")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: measure the checkout of this include/
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.repeat)))
        return 0
    runs = {"this checkout": REPO}
    if args.baseline:
        runs["baseline"] = args.baseline
    results = {}
    for label, checkout in runs.items():
        out = subprocess.run([sys.executable, __file__, "--measure", str(checkout / "include"),
                              "--repeat", str(args.repeat)], capture_output=True, text=True, check=True)
        results[label] = json.loads(out.stdout)
    names = list(next(iter(results.values())))
    print(f"{'answer':<46}" + "".join(f"{label:>16}" for label in results))
    for name in names:
        print(f"{name:<46}" + "".join(f"{results[label][name] * 1000:>13.1f} ms" for label in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
