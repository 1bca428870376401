"""Encode a scrape with prometheus_client's own encoders: the Prometheus text format, or OpenMetrics
when the Accept header asks for it (prometheus_client.exposition.choose_encoder)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder


def registry_of(collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def scrape(collector, accept: str | None = None) -> tuple[bytes, str]:
    """(body, content type) of one scrape of `collector`, negotiated from `accept`."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry_of(collector)), content_type
