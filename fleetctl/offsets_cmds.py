"""fleetctl offsets: decode one record, the cleaner's capacity (dump and health: fleetctl.incident)."""

from __future__ import annotations

import json
import sys

from fleetctl.incident import add_health_parser, add_offsets_parsers
from fleetctl.output import with_examples


def cmd_offsets_decode(args) -> int:
    from fleetkit.clients.offsets_codec import DecodeError, decode

    try:
        key = bytes.fromhex(args.key)
        value = bytes.fromhex(args.value) if args.value is not None else None
    except ValueError as e:
        print(f"error: --key/--value must be hex: {e}", file=sys.stderr)
        return 2
    try:
        out = decode(key, value, "record")
    except DecodeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if out.pop("kind", None) == "unknown":
        # a record type (key version) this decoder does not know: said so, never shown as a record
        out = {"key_version": out["key_version"], "unknown": True, "tombstone": out["tombstone"],
               "key_hex": key.hex(), "value_hex": value.hex() if value is not None else None}
        print(f"note: key version {out['key_version']} is a record type this decoder does not know: not decoded",
              file=sys.stderr)
    print(json.dumps(out, ensure_ascii=False))
    return 0


def cmd_offsets_capacity(args) -> int:
    from fleetkit.trim.cleaner import capacity

    try:
        print(json.dumps(capacity(args.dedupe_buffer_size, args.threads, args.load_factor)))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def add_parser(sub) -> None:
    o = sub.add_parser("offsets", help="__consumer_offsets: dump, health, decode records, cleaner capacity")
    o_sub = o.add_subparsers(dest="offsets_command", required=True)
    od = o_sub.add_parser("decode", help="decode one __consumer_offsets record given as hex (a record type this "
                                         "decoder does not know: \"unknown\": true, key and value in hex)")
    od.add_argument("--key", required=True, help="the record key, hex")
    od.add_argument("--value", help="the record value, hex (absent: a tombstone)")
    with_examples(od, "examples:\n  fleetctl offsets decode --key 0001000a6f72646572732d6170700007696e766f69636500000000\n    # an offset commit's key: group orders-app, topic invoice, partition 0")
    od.set_defaults(func=cmd_offsets_decode)
    add_offsets_parsers(o_sub)
    add_health_parser(o_sub)
    oc = o_sub.add_parser("cleaner-capacity", help="how many keys one log-cleaner pass can map")
    oc.add_argument("--dedupe-buffer-size", type=int, required=True, help="log.cleaner.dedupe.buffer.size, bytes")
    oc.add_argument("--threads", type=int, default=1, help="log.cleaner.threads")
    oc.add_argument("--load-factor", type=float, default=0.9, help="log.cleaner.io.buffer.load.factor")
    with_examples(oc, "example:\n  fleetctl offsets cleaner-capacity --dedupe-buffer-size 134217728 --threads 1")
    oc.set_defaults(func=cmd_offsets_capacity)
