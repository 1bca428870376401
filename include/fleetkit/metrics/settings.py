"""The deployment's settings of the metrics: the limits (FLEET_METRICS_MAX_*) and the compatible
names published (FLEET_METRICS_NAMES), read on every scrape; a value set wrong is a ValueError
naming it (the api-server answers 500 with the line)."""

from __future__ import annotations

from fleetkit.metrics.names import DEFAULT_NAME_SETS, NAME_SETS

DEFAULT_MAX_PARTITIONS = 100_000
DEFAULT_MAX_GROUPS = 20_000


def _limit(name: str, default: int) -> int:
    """A limit of the deployment (settings.whole_number); ValueError naming it when set wrong."""
    from fleetkit.core.errors import FleetConfigError
    from fleetkit.core.settings import whole_number

    try:
        return whole_number(name, default)
    except FleetConfigError as e:
        raise ValueError(str(e)) from None


#: the largest scrape answered (FLEET_METRICS_MAX_BODY_BYTES): past it the scrape fails naming the
#: limit, rather than the api-server building and sending an answer of any size
DEFAULT_MAX_BODY_BYTES = 256 * 1024 * 1024


def max_body_bytes() -> int:
    return _limit("FLEET_METRICS_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)


def name_sets() -> tuple[str, ...]:
    """The compatible name sets a scrape carries (FLEET_METRICS_NAMES, comma-separated, of
    NAME_SETS; default kafka-lag-exporter); ValueError naming the setting when it names another."""
    import os

    raw = os.environ.get("FLEET_METRICS_NAMES", "").strip()
    if not raw:
        return DEFAULT_NAME_SETS
    sets = tuple(dict.fromkeys(x.strip().lower() for x in raw.split(",") if x.strip()))
    unknown = [x for x in sets if x not in NAME_SETS]
    if unknown or not sets:
        raise ValueError(f"FLEET_METRICS_NAMES={raw!r}: expected a comma-separated list of "
                         f"{', '.join(NAME_SETS)} (got {', '.join(unknown) or 'nothing'})")
    return sets


def limits() -> tuple[int, int]:
    """(partitions, groups) with series: FLEET_METRICS_MAX_PARTITION_SERIES, FLEET_METRICS_MAX_GROUP_SERIES."""
    return (_limit("FLEET_METRICS_MAX_PARTITION_SERIES", DEFAULT_MAX_PARTITIONS),
            _limit("FLEET_METRICS_MAX_GROUP_SERIES", DEFAULT_MAX_GROUPS))
