"""Encode a scrape with prometheus_client's own encoders: the Prometheus text format, or OpenMetrics
when the Accept header asks for it (prometheus_client.exposition.choose_encoder). A FleetCollector's
per-partition section is encoded once per version of the read model and format (collector.Section)
and appended to the rest, encoded on every scrape."""

from __future__ import annotations

import struct
import zlib

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder


def registry_of(collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


#: gzip level of a compressed scrape: a 100 MB scrape in about half a second, about a tenth the size
GZIP_LEVEL = 1


class Deflated:
    """A part of a body compressed once (raw deflate, ending in the final block), with what a gzip
    trailer needs of it: its CRC-32 and length."""

    __slots__ = ("data", "crc", "size")

    def __init__(self, plain: bytes):
        c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        self.data, self.crc, self.size = c.compress(plain) + c.flush(zlib.Z_FINISH), zlib.crc32(plain), len(plain)


def gzipped(head: bytes, tail: Deflated | None = None) -> bytes:
    """One gzip stream (RFC 1952) of head + the tail compressed before: the head's deflate data is
    flushed with a full flush (no back-reference across it, no final block), then the tail's follows
    as it is, then the trailer over both. One member, so every gzip reader reads all of it."""
    c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    crc, size = zlib.crc32(head), len(head)
    if tail is None:
        data = c.compress(head) + c.flush(zlib.Z_FINISH)
    else:
        data = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH) + tail.data
        crc, size = crc32_combine(crc, tail.crc, tail.size), size + tail.size
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, no mtime, unknown OS
    return header + data + struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of A + B from crc(A), crc(B) and len(B) (zlib's crc32_combine, which Python's zlib
    does not expose): crc(A + B) = crc(A + zeros(len B)) ^ crc(zeros(len B)) ^ crc(B), the zeros fed
    in 64 KiB blocks (a 100 MB part: about 0.1 s)."""
    zeros = bytes(1 << 16)
    a, z, left = crc1, 0, len2
    while left:
        chunk = zeros if left >= len(zeros) else zeros[:left]
        a, z = zlib.crc32(chunk, a), zlib.crc32(chunk, z)
        left -= len(chunk)
    return a ^ z ^ crc2


def scrape(collector, accept: str | None = None, max_bytes: int | None = None,
           compress: bool = False) -> tuple[bytes, str]:
    """(body, content type) of one scrape of `collector`, negotiated from `accept`, gzip-compressed
    when `compress` (the caller sets Content-Encoding); ValueError naming the limit when the
    uncompressed body is longer than `max_bytes` (FLEET_METRICS_MAX_BODY_BYTES by default)."""
    from fleetkit.metrics.settings import max_body_bytes

    limit = max_body_bytes() if max_bytes is None else max_bytes
    encoder, content_type = choose_encoder(accept or "")
    if hasattr(collector, "section_apart"):  # a FleetCollector: its large section's encoding is cached
        collector.section_apart = True
        head = encoder(registry_of(collector))
        section = collector.section
        tail = section.encode(encoder, content_type) if section is not None else b""
        eof = b"# EOF\n"  # (OpenMetrics ends with it once)
        if head.endswith(eof) and tail.endswith(eof):
            head = head[:-len(eof)]
        check(len(head) + len(tail), limit)
        if compress:
            return gzipped(head, section.encode(encoder, content_type, True) if tail else None), content_type
        return head + tail, content_type
    body = encoder(registry_of(collector))
    check(len(body), limit)
    return (gzipped(body) if compress else body), content_type


def check(size: int, limit: int) -> None:
    if limit and size > limit:
        raise ValueError(f"the scrape is {size:,} bytes, over FLEET_METRICS_MAX_BODY_BYTES={limit:,}: lower "
                         "FLEET_METRICS_MAX_PARTITION_SERIES / FLEET_METRICS_MAX_GROUP_SERIES, or raise the limit")
