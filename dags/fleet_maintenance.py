"""fleet_maintenance: the scheduled, read-only maintenance run over every cluster of the fleet."""

from __future__ import annotations

import datetime as dt

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param, task

from fleet_airflow import settings
from fleet_airflow.operators.collect import CollectClusterOperator, CollectOffsetsTopicOperator
from fleet_airflow.operators.trim_report import TrimHealthReportOperator
from fleet_airflow.operators.report import StuckReportOperator
from fleet_airflow.operators.spark import spark_job_operator

DOC = """
### Fleet maintenance (scheduled, read-only)

Every collection interval (the deployment's `FLEET_COLLECTION_INTERVAL`, default 5 minutes: this
DAG's schedule, and the age past which the fleet page calls a cluster STALE is twice it), for
**every cluster in the fleet file**:

1. **collect** (one mapped task per cluster):
   * `offsets_snapshots`: per group x partition, the committed offset, log start / end, the group
     state and whether a live member is assigned the partition;
   * `partition_state`: leader, ISR, leader epoch of `__consumer_offsets` and of every topic a group
     consumes (from ZooKeeper on ZooKeeper-mode clusters);
   * `group_coordinators`: which broker coordinates each group, or the error it answers.

   Groups are those the cluster lists, plus those seen before, plus those named in the fleet file
   (Kafka 0.9 forgets a group whose last member left, but its offsets stay). A cluster that does not
   answer fails only its own `collect` task (the log names the cluster and its bootstrap servers).
   A **blind** collection (a refused ACL, groups whose offsets were not readable, no rows from a
   cluster with groups) is written, then fails its `collect` task with one line naming what was not
   seen; the fleet page and the report show the cluster BLIND in red, its unseen groups never OK.
2. **analyse_stuck** (Spark, `spark_jobs/stuck.py`, master from the `spark_default`
   connection; an input of up to 200,000 rows on a local data root is judged in the task's own
   process with the same rules and files, without Spark's start-up: `FLEET_STUCK_INPROCESS_MAX_ROWS`,
   0 for always Spark): each partition's snapshots over the `window` are judged NO_COMMIT, OUT_OF_RANGE,
   OK, INSUFFICIENT_DATA, REWOUND, STALLED (alive, offset frozen: a poison record), STOPPED (no live
   member), LAGGING (falling behind production); groups get their worst status and a rebalance-storm
   flag from the members that left and came back (group-metadata records of `__consumer_offsets`),
   with the cause (poll interval, restart, session) and the fix it calls for. A frozen offset is judged against the partition's own commit rhythm (commit times from
   `__consumer_offsets`), not the window: a consumer committing every few seconds is flagged one or
   two collections after it stops, with `stalled_since` / `stopped_since` and a confidence. Verdicts
   come no sooner than the next run of this DAG: its schedule bounds how fast they arrive. Runs
   even when a cluster's collection failed.
3. **report_stuck**: HTML + Markdown report (per-cluster summary, every flagged partition with its
   reason and a lag-over-time chart, how long until a STOPPED group's offsets expire), linked from
   the task (**Stuck report** button) and logged; STOPPED / STALLED / OUT_OF_RANGE partitions and
   rebalance storms fire the alert notifier (log; e-mail when the fleet file sets `alerts:`). The
   job's outputs are copied to `reports/stuck/latest`, which the **Kafka fleet** page of the
   navigation (`/fleet/`) reads: groups by verdict, each partition's lag and chart, and a
   prefilled runbook form for a flagged partition. In a terminal: `fleetctl stuck --cluster C`.

4. **collect_offsets** (mapped per cluster): new `__consumer_offsets` records (incremental) and the
   segment inventory / cleaner checkpoints of the brokers' log dirs; then, hourly (param
   `offsets_health`: hourly, i.e. the first run of each hour | always | never), **trim_health** (one Spark application: the health, then the trim plans) and
   **report_offsets**: verdicts HEALTHY / BLOATED / CLEANER_STALLED / OVER_CAPACITY with the cleaner
   fix, and lossless trim plans (executed only by `runbook_trim`, behind an approval).
   These Spark jobs start once **analyse_stuck** is over (whatever its outcome): the stuck verdicts,
   the incident path, never share the Spark cores with the hourly health.

`all_clusters_collected` fails (upstream_failed) when any cluster's collection failed or was blind, so
the run shows as failed while the analyses still ran on the clusters that answered.

This DAG **never changes a cluster**. Params: `window` (e.g. `15m`, at least three collection
intervals; the lab uses `2m` with collections 15-20 s apart), `lag_growth_ratio`, `offsets_retention`
(the brokers' offsets.retention.minutes), `offsets_health`.
The fleet file and the data root are deployment settings (`FLEET_FILE`, `FLEET_DATA_ROOT`), never
params: a run whose conf names `fleet_file` or `data_root` is refused (each task fails before it reads
or writes anything).
"""

RUN_OUT = "{{ fleet_settings.data_root }}/reports/stuck/{{ run_id | run_folder_name }}"

with DAG(
    dag_id="fleet_maintenance",
    description="Collect fleet state, find stuck offsets, report (read-only)",
    schedule=settings.collection_schedule(),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["fleet", "maintenance", "read-only"],
    default_args=settings.deployment_default_args(),
    user_defined_filters=settings.TEMPLATE_FILTERS, user_defined_macros=settings.DEPLOYMENT_MACROS,
    params={
        "window": Param("15m", type="string", pattern=r"^\d+(\.\d+)?[smhd]$", description="analysis window"),
        "lag_growth_ratio": Param(0.05, type="number", minimum=0, maximum=1),
        "offsets_retention": Param("1440m", type="string", pattern=r"^\d+(\.\d+)?[smhd]$"),
        "offsets_health": Param("hourly", type="string", enum=["hourly", "always", "never"],
                                description="when to analyse __consumer_offsets (the collection always runs)"),
    },
) as dag:

    @task
    def list_clusters() -> list[str]:
        from fleetkit.core.fleet import load_fleet

        return load_fleet(settings.fleet_file()).names

    clusters = list_clusters()
    collect = CollectClusterOperator.partial(
        task_id="collect",
        fleet_file="{{ fleet_settings.fleet_file }}",
        data_root="{{ fleet_settings.data_root }}",
        retention_days=settings.retention_days(),
        map_index_template="{{ task.cluster }}",
        execution_timeout=dt.timedelta(minutes=10),
    ).expand(cluster=clusters)

    analyse = spark_job_operator(
        "analyse_stuck", "stuck",
        [
            "--snapshots", "{{ fleet_settings.data_root }}/offsets_snapshots",
            "--out", RUN_OUT,
            "--window", "{{ params.window }}",
            "--lag-growth-ratio", "{{ params.lag_growth_ratio }}",
            "--offsets-retention", "{{ params.offsets_retention }}",
            "--data-root", "{{ fleet_settings.data_root }}",
            "--recent-days", "2",
        ],
        trigger_rule="all_done",
        execution_timeout=dt.timedelta(minutes=20),
        in_process_input="--snapshots",
    )

    report = StuckReportOperator(
        task_id="report_stuck",
        out_dir=RUN_OUT,
        fleet_file="{{ fleet_settings.fleet_file }}",
        data_root="{{ fleet_settings.data_root }}",
        window="{{ params.window }}",
    )

    collect >> analyse >> report

    collect_offsets = CollectOffsetsTopicOperator.partial(
        task_id="collect_offsets",
        fleet_file="{{ fleet_settings.fleet_file }}",
        data_root="{{ fleet_settings.data_root }}",
        map_index_template="{{ task.cluster }}",
        execution_timeout=dt.timedelta(minutes=30),
    ).expand(cluster=clusters)

    @task.short_circuit(trigger_rule="all_done")
    def health_due(params=None, logical_date=None, dag_run=None) -> bool:
        """hourly: the run whose time falls in the first collection interval of its hour (every run
        when the interval is an hour or more)."""
        mode = params["offsets_health"]
        when = logical_date or dag_run.run_after
        return mode == "always" or (mode == "hourly" and when.minute * 60 + when.second < settings.collection_interval())

    OFFSETS_OUT = "{{ fleet_settings.data_root }}/reports/offsets/{{ run_id | run_folder_name }}"
    health = spark_job_operator(
        "trim_health", "trim_health",
        ["--data-root", "{{ fleet_settings.data_root }}", "--fleet", "{{ fleet_settings.fleet_file }}",
         "--out", OFFSETS_OUT, "--trim-plan"],
        execution_timeout=dt.timedelta(minutes=30), in_process_input="--data-root")
    report_offsets = TrimHealthReportOperator(task_id="report_offsets", out_dir=OFFSETS_OUT,
                                                 fleet_file="{{ fleet_settings.fleet_file }}")
    [collect_offsets, analyse] >> health_due() >> health >> report_offsets

    # the analyses run on whatever was collected; this marks the run failed when a cluster was not
    [collect, collect_offsets] >> EmptyOperator(task_id="all_clusters_collected")
