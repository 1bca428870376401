"""group_ids: reconcile KoP client-to-group mappings with the live members (hourly)."""

from __future__ import annotations

import datetime as dt

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param, task

from fleet_airflow import settings
from fleet_airflow.dag_files import dag_kwargs
from fleet_airflow.operators.group_ids import CollectGroupIdsOperator, CreateMissingGroupIdsOperator, GroupIdReportOperator
from fleet_airflow.operators.spark import spark_job_operator

DOC = """
### Group-id reconciliation (scheduled; writes only MISSING mappings, and only where allowed)

KoP-style brokers keep one znode per consumer client, `<root>/<ip>-<clientId>` = the group id
(UTF-8). Broker restarts and deletes racing newer writes leave live consumers without a mapping
(their metrics lose the group) and stale znodes behind. The coordinators' member lists are the truth.

Hourly, for every cluster whose fleet file entry has a `group_id_mappings` section
(`root`, default `/client_group_id` below the chroot; `create_missing_unattended`; `grace`, default `1h`):

1. **collect** (mapped per cluster): every child of the root with data, version, ctime, mtime (read
   concurrently) -> `group_id_mappings`; every listed group's live members (client id, bare client
   host) -> `group_members`. All or nothing.
2. **diff** (Spark, `spark_jobs/group_ids.py`): per path, first match wins:
   UNREPRESENTABLE (client id with `/` or characters ZooKeeper refuses: reported), CONFLICT (one
   ip-clientId live in two groups: reported, never written), MISMATCHED, MISSING, STALE (no live
   member, unmodified for longer than the grace), OK.
   Runs even when a cluster's collection failed; a cluster whose newest collection is older than
   30 minutes is left out (never judged on old data).
3. **report**: `reports/group_ids/<run>/report.md` and the task log list every finding.
4. **create_missing**: creates the MISSING mappings of clusters with `create_missing_unattended: true`
   (members re-read first; a create fails if the node appeared meanwhile: skipped, reported), journal
   under `journals/group_ids/`, audit record with every path created.

MISMATCHED overwrites and STALE deletes are destructive: `runbook_group_ids` plans
them and waits for an approval. Params: `create_missing` (false: report only). Which clusters may have
mappings created unattended is the fleet file's to say, and the fleet file is not a param either.
The fleet file and the data root are deployment settings (`FLEET_FILE`, `FLEET_DATA_ROOT`), never
params: a run whose conf names `fleet_file` or `data_root` is refused (each task fails before it reads
or writes anything).
"""

RUN_OUT = "{{ fleet_settings.data_root }}/reports/group_ids/{{ run_id | run_folder_name }}"


def build(dag_id: str = "group_ids"):
    """The DAG under `dag_id`: its own, or an old one of fleet_airflow.dag_files.RENAMED (the
    deprecated alias: the same tasks, never scheduled)."""
    with DAG(**dag_kwargs(dict(
        dag_id=dag_id,
        description="Reconcile KoP client-to-group mapping znodes with the live group members",
        schedule="@hourly",
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=1,
        doc_md=DOC,
        tags=["fleet", "maintenance", "kop"],
        user_defined_filters=settings.TEMPLATE_FILTERS, user_defined_macros=settings.DEPLOYMENT_MACROS,
        default_args=settings.deployment_default_args(),
        params={
            "create_missing": Param(True, type="boolean",
                                    description="create MISSING mappings where the fleet file allows it unattended"),
        },
    ))) as dag:

        @task
        def list_clusters() -> list[str]:
            from fleetkit.core.fleet import load_fleet

            return [c.name for c in load_fleet(settings.fleet_file()).clusters if c.group_id_mappings is not None]

        clusters = list_clusters()
        collect = CollectGroupIdsOperator.partial(
            task_id="collect", fleet_file="{{ fleet_settings.fleet_file }}", data_root="{{ fleet_settings.data_root }}",
            map_index_template="{{ task.cluster }}", execution_timeout=dt.timedelta(minutes=15),
        ).expand(cluster=clusters)
        diff = spark_job_operator(
            "diff", "group_ids",
            ["--data-root", "{{ fleet_settings.data_root }}", "--fleet", "{{ fleet_settings.fleet_file }}",
             "--out", RUN_OUT, "--max-age", "30m"],
            execution_timeout=dt.timedelta(minutes=30),
            trigger_rule="all_done",  # the clusters that answered are reconciled even when one did not
            in_process_input="--data-root",
        )
        report = GroupIdReportOperator(task_id="report", out_dir=RUN_OUT, fleet_file="{{ fleet_settings.fleet_file }}")
        create = CreateMissingGroupIdsOperator(
            task_id="create_missing", out_dir=RUN_OUT, enabled="{{ params.create_missing }}",
            execution_timeout=dt.timedelta(minutes=30),
        )
        collect >> diff >> report >> create
        # the diff runs on whatever was collected; this marks the run failed when a cluster was not
        collect >> EmptyOperator(task_id="all_clusters_collected")
    return dag


dag = build()
