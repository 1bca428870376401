"""ownership: who coordinates each group, who answers, which partitions are stuck
loading -- started by leader-change events (asset watchers: ZooKeeper watches, or Metadata polls on
KRaft clusters) or by hand."""

from __future__ import annotations

import datetime as dt
import logging

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Asset, AssetAny, AssetWatcher, Param, task

from fleet_airflow import settings
from fleet_airflow.dag_files import dag_kwargs
from fleet_airflow.operators.spark import spark_job_operator
from fleet_airflow.ownership_check import asset_name, asset_uri
from fleet_airflow.triggers.leader_change import LeaderChangeTrigger

log = logging.getLogger(__name__)

DOC = """
### Group-coordinator ownership check (read-only)

**Started by a leader change.** For every cluster of the fleet file, an asset watcher runs
`LeaderChangeTrigger` in the **triggerer**: on a ZooKeeper-mode cluster a ZooKeeper watch on each
`__consumer_offsets` partition state znode; on a cluster without ZooKeeper (KRaft) a Metadata
request (v7+, leader epochs) every 2 s. When a leader epoch changes (a broker stopped, an
election, a reassignment) the trigger emits an event, the asset `kafka_leader_change__<cluster>`
gets an asset event, and this DAG runs within seconds. No worker slot waits; a lost ZooKeeper
session is re-established and everything re-read, so a change is not missed. Manual runs check the
`cluster` param (`all` by default).

1. **which_clusters**: the clusters named by the triggering events (with the epoch changes), or
   the param.
2. **collect** (mapped per cluster): `group_coordinators` (the coordinator each group's lookup
   names and what that broker answers, on the wire) and `partition_state` of `__consumer_offsets`,
   repeated every `interval_seconds` while a group is not served, for up to `settle_seconds`.
3. **analyse_ownership** (Spark, `spark_jobs/ownership.py`): per group OK / MISMATCH /
   LOADING / UNAVAILABLE (LOADING = COORDINATOR_LOAD_IN_PROGRESS, or NOT_COORDINATOR from the
   partition's own leader, which is how 0.9 shows a load); per partition the leader-epoch changes
   in the `window`, the groups affected, how long they have not been served since the change, when
   they recovered, size and health (from the newest trim_health run) and **LOAD_STUCK** past
   `load_stuck`.
4. **report_ownership**: `reports/coordinator/<run>/report.md` (and `.../latest/`), logged.
5. **start_recovery**: for each LOAD_STUCK or MISMATCH partition (param `recovery`: `approval`
   starts `runbook_ownership` waiting for an approver, `dry_run` only renders its plan,
   `off` starts nothing).

This DAG never changes a cluster. Params: `cluster`, `window`, `load_stuck`, `settle_seconds`,
`interval_seconds`, `recovery`.
The fleet file and the data root are deployment settings (`FLEET_FILE`, `FLEET_DATA_ROOT`), never
params: a run whose conf names `fleet_file` or `data_root` is refused (each task fails before it reads
or writes anything).
"""


def _watched_assets() -> list[Asset]:
    from fleetkit.core.errors import FleetError
    from fleetkit.core.fleet import load_fleet

    path = settings.fleet_file()
    try:
        fleet = load_fleet(path)
    except (FleetError, OSError) as e:
        log.error("no leader-change watch: fleet file %s is not usable: %s", path, e)
        return []
    # ZooKeeper-mode clusters: watches on the partition state znodes; others (KRaft): Metadata polls
    return [Asset(name=asset_name(c.name), uri=asset_uri(c.name), group="kafka-leader-change",
                  watchers=[AssetWatcher(name=f"{'zk' if c.zookeeper is not None else 'metadata'}_leader_epochs__"
                                              f"{c.name}",
                                         trigger=LeaderChangeTrigger(cluster=c.name, fleet_file=path))])
            for c in fleet.clusters]


ASSETS = _watched_assets()
RUN_OUT = "{{ fleet_settings.data_root }}/reports/coordinator/{{ run_id | run_folder_name }}"


def build(dag_id: str = "ownership"):
    """The DAG under `dag_id`: its own, or an old one of fleet_airflow.dag_files.RENAMED (the
    deprecated alias: the same tasks, never scheduled)."""
    with DAG(**dag_kwargs(dict(
        dag_id=dag_id,
        description="Group-coordinator ownership after leader changes (read-only; started by leader-change watches)",
        schedule=AssetAny(*ASSETS) if ASSETS else None,
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=2,
        doc_md=DOC,
        tags=["fleet", "coordinator", "read-only"],
        default_args=settings.deployment_default_args(),
        user_defined_filters=settings.TEMPLATE_FILTERS, user_defined_macros=settings.DEPLOYMENT_MACROS,
        params={
            "cluster": Param("all", type="string", description="manual runs: a cluster name from the fleet file, or all"),
            "window": Param("1h", type="string", pattern=r"^\d+(\.\d+)?[smhd]$", description="leader history window"),
            "load_stuck": Param("5m", type="string", pattern=r"^\d+(\.\d+)?[smhd]$",
                                description="not served this long after a leader change = LOAD_STUCK"),
            "settle_seconds": Param(60, type="integer", minimum=0, maximum=3600,
                                    description="keep collecting while groups are not served, up to this long"),
            "interval_seconds": Param(5, type="integer", minimum=1, maximum=300),
            "recovery": Param("approval", type="string", enum=["approval", "dry_run", "off"],
                              description="what to start for a LOAD_STUCK / MISMATCH partition"),
        },
    ))) as dag:

        @task
        def which_clusters(params=None, **context) -> dict:
            from fleetkit.core.fleet import load_fleet

            from fleetkit.core.settings import newest_trim_health

            from fleetkit.ownership.collect import clusters_to_check, record_changes

            from fleet_airflow.ownership_check import events_from_context

            fleet_names = load_fleet(settings.fleet_file()).names
            events, refused = events_from_context(context, fleet_names)
            for line in refused:  # posted through the REST API for another or no cluster: never acted on
                log.error("%s", line)
            for e in events:
                log.warning("leader change on cluster %s: %s", e["cluster"],
                            "; ".join(f"partition {c['partition']} leader {c['from_leader']} -> {c['to_leader']} "
                                      f"(epoch {c['from_epoch']} -> {c['to_epoch']})" for c in e["changes"]))
            record_changes(settings.data_root(), events)
            names = clusters_to_check(params, events, fleet_names)
            return {"clusters": names, "events": events, "health": str(newest_trim_health(settings.data_root()) or "")}

        @task(map_index_template="{{ cluster }}", execution_timeout=dt.timedelta(minutes=70))
        def collect(cluster: str, params=None) -> dict:
            from fleetkit.core.fleet import load_fleet

            from fleet_airflow.clusters import collect_until_settled

            c = load_fleet(settings.fleet_file()).cluster(cluster)
            passes = collect_until_settled(
                c, settings.data_root(), settle_seconds=float(params["settle_seconds"]),
                interval=float(params["interval_seconds"]),
                log_each=lambda s: log.info("cluster %s at %s: %d of %d groups not served %s", cluster,
                                            s["observed_at"], s["not_ok"], s["groups"], s["examples"] or ""))
            return {"cluster": cluster, "passes": passes}

        @task
        def cluster_names(checked: dict) -> list[str]:
            return checked["clusters"]

        checked = which_clusters()
        collected = collect.expand(cluster=cluster_names(checked))

        analyse = spark_job_operator(
            "analyse_ownership", "ownership",
            [
                "--data-root", "{{ fleet_settings.data_root }}", "--out", RUN_OUT, "--window", "{{ params.window }}",
                "--load-stuck", "{{ params.load_stuck }}",
                "--health", "{{ ti.xcom_pull(task_ids='which_clusters')['health'] }}",
            ],
            trigger_rule="all_done",
            execution_timeout=dt.timedelta(minutes=20),
        )

        @task
        def report_ownership(checked: dict, collected: list, params=None, run_id=None) -> list[dict]:
            from fleetkit.ownership.report import report

            from fleetkit.core.settings import run_folder

            out = str(run_folder(f"{settings.data_root()}/reports", "coordinator", run_id))
            passes = {c["cluster"]: c["passes"] for c in collected or [] if c}
            summary = report(out, settings.data_root(), checked["events"], passes, params["load_stuck"])
            log.info("ownership report: %s", summary["report"])
            for cluster, partition, verdict in summary["partitions_flagged"]:
                log.warning("cluster %s partition %s: %s", cluster, partition, verdict)
            if params["recovery"] == "off":
                return []
            return [{"cluster": r["cluster"], "partition": r["partition"], "group": "", "action": "move_leader",
                     "dry_run": params["recovery"] == "dry_run", "evidence_run": run_id}
                    for r in summary["needs_recovery"]]

        reported = report_ownership(checked, collected)
        analyse.set_upstream(collected)
        reported.set_upstream(analyse)

        TriggerDagRunOperator.partial(
            task_id="start_recovery", trigger_dag_id="runbook_ownership", wait_for_completion=False,
        ).expand(conf=reported)
    return dag


dag = build()
