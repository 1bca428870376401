"""Burrow's HTTP API (v3, read endpoints) from the toolkit's own verdicts, for tools built on Burrow.

`BurrowAPI` (api.py) answers Burrow 1.x's read routes with its JSON shapes, key for key, from the
fleet page's read model (`fleetkit.fleetview.FleetView`: the newest stuck run, the fleet file, the
blind rule): no second store, no cluster reached. `status.py` is the one table from the stuck
verdicts to Burrow's words (NOTFOUND, OK, WARN, ERR, STOP, STALL, REWIND) and Burrow's roll-up of a
group. No Airflow or Spark import: the api-server's `/fleet/burrow/v3/...` route
(plugins/fleet_airflow/fleet_page.py) is the adapter. docs/burrow.md says what differs from Burrow.
"""

from fleetkit.burrow.api import Answer, BurrowAPI, split_path
from fleetkit.burrow.status import WORDS, group_status, partition_status

__all__ = ["WORDS", "Answer", "BurrowAPI", "group_status", "partition_status", "split_path"]
