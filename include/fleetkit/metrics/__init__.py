"""Metrics where SREs already look: the newest judged state of the fleet for Prometheus.

`FleetCollector` (collector.py) is a prometheus_client custom collector over the fleet page's read
model (`fleetkit.fleetview.FleetView`: the same files, the same caches, the same blind rule);
`exposition.scrape` encodes it (text format, or OpenMetrics when the Accept header asks for it).
`names.METRICS` is the one list of what is published (names, labels, help): the Grafana
dashboard's test and docs/metrics.md read it. No Airflow or Spark import: the api-server's
`/fleet/metrics` route (plugins/fleet_airflow/fleet_page.py) is the adapter.
"""

from fleetkit.metrics.collector import FleetCollector
from fleetkit.metrics.exposition import scrape
from fleetkit.metrics.names import COMPAT, METRICS
from fleetkit.metrics.settings import limits

__all__ = ["COMPAT", "METRICS", "FleetCollector", "limits", "scrape"]
