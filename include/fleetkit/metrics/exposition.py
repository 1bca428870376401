"""Encode a scrape with prometheus_client's own encoders: the Prometheus text format, or OpenMetrics
when the Accept header asks for it (prometheus_client.exposition.choose_encoder)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder


def registry_of(collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def scrape(collector, accept: str | None = None, max_bytes: int | None = None) -> tuple[bytes, str]:
    """(body, content type) of one scrape of `collector`, negotiated from `accept`; ValueError naming
    the limit when the body is longer than `max_bytes` (FLEET_METRICS_MAX_BODY_BYTES by default)."""
    from fleetkit.metrics.collector import max_body_bytes

    limit = max_body_bytes() if max_bytes is None else max_bytes
    encoder, content_type = choose_encoder(accept or "")
    body = encoder(registry_of(collector))
    if limit and len(body) > limit:
        raise ValueError(f"the scrape is {len(body):,} bytes, over FLEET_METRICS_MAX_BODY_BYTES={limit:,}: lower "
                         "FLEET_METRICS_MAX_PARTITION_SERIES / FLEET_METRICS_MAX_GROUP_SERIES, or raise the limit")
    return body, content_type
