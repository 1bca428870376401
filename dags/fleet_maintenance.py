"""fleet_maintenance: the scheduled, read-only maintenance run over every cluster of the fleet."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, task

from fleet_airflow import settings
from fleet_airflow.operators.collect import CollectClusterOperator

DOC = """
### Fleet maintenance (scheduled, read-only)

Every 5 minutes, for **every cluster in the fleet file**, collects:

* `offsets_snapshots`: per group x partition, the committed offset, log start / end, the group
  state and whether a live member is assigned the partition;
* `partition_state`: leader, ISR, leader epoch of `__consumer_offsets` and of every topic a group
  consumes (from ZooKeeper on ZooKeeper-mode clusters);
* `group_coordinators`: which broker coordinates each group, or the error it answers.

Groups are those the cluster lists, plus those seen before, plus those named in the fleet file
(Kafka 0.9 forgets a group whose last member left, but its offsets stay: a stopped group must not
vanish from the data). Rows go to Parquet under the data root, one collection all-or-nothing.

This DAG **never changes a cluster**. A cluster that does not answer fails only its own
`collect` task (the log names the cluster and its bootstrap servers).

Settings: `FLEET_FILE` (default `include/fleets/lab.yaml`), `FLEET_DATA_ROOT` (default `data/`).
"""

with DAG(
    dag_id="fleet_maintenance",
    description="Collect fleet state every 5 minutes (read-only)",
    schedule="*/5 * * * *",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["fleet", "maintenance", "read-only"],
    default_args={"retries": 0},
    params={"fleet_file": settings.fleet_file(), "data_root": settings.data_root()},
) as dag:

    @task
    def list_clusters(params=None) -> list[str]:
        from fleetkit.fleet import load_fleet

        return load_fleet(params["fleet_file"]).names

    collect = CollectClusterOperator.partial(
        task_id="collect",
        fleet_file="{{ params.fleet_file }}",
        data_root="{{ params.data_root }}",
        retention_days=settings.retention_days(),
        map_index_template="{{ task.cluster }}",
        execution_timeout=dt.timedelta(minutes=10),
    ).expand(cluster=list_clusters())
