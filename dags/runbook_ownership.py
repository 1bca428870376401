"""runbook_ownership: bring a group coordinator back, behind an approval."""

from __future__ import annotations

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Param, task

from fleet_airflow.actions import COORDINATOR_RECOVERY
from fleet_airflow.dag_files import dag_kwargs
from fleet_airflow.gate import approval_gate, runbook_dag_args

DOC = """
### Recover a group coordinator (incident runbook, destructive)

When consumers loop on "not coordinator" / "obsolete coordinator information" after a leader
change, the new leader of the group's `__consumer_offsets` partition has not finished loading it
(`ownership` reports the partition LOADING, then LOAD_STUCK). Started by hand, or by
`ownership` for a LOAD_STUCK / MISMATCH partition.

**Params**: `cluster`; `group` and/or `partition` (the group's partition is computed as Kafka does;
both given must agree); `action`:

* `move_leader` (default): make another in-sync replica (`target_broker`, default the first ISR
  replica that is not the leader) the leader: the replicas are reordered through
  `/admin/reassign_partitions` (same replica set, no data moves), then a preferred-replica election
  through `/admin/preferred_replica_election`. Keep `auto.leader.rebalance.enable=false`.
* `restart_broker` (lab fleets): restart the broker (`target_broker`, default the leader).
* `trim_handover`: nothing changes here; starts `runbook_trim` for the cluster and the
  partition (a bloated partition loads slowly on any leader: trim it).

**Evidence** in the plan: the coordinator each group's lookup names and what it answers vs the
partition's leader, the leader / ISR / epoch history (partition_state), how long the groups have
not been served (newest ownership report), the partition's size and health (newest trim_health
run).

**Flow**: plan -> `dry_run_stop` (default **dry run**) -> approve -> lock -> execute (refuses if the
leader or its epoch changed since the plan, the target left the ISR, or another reassignment /
election is in progress) -> verify (the new leader / the broker back in the ISR, and every group
of the plan served again, waiting for the load) -> unlock. Roll back a move: the `executed` audit
record's rollback conf (`fleetctl audit rollback RECORD_ID`) moves leadership back to the old leader and
sets `replica_order` to the order before, exactly. The order approved is the order executed.
"""


def build(dag_id: str = "runbook_ownership"):
    """The runbook under `dag_id`: its own, or an old one of fleet_airflow.dag_files.RENAMED (the
    deprecated alias, the same tasks)."""
    with DAG(**dag_kwargs(runbook_dag_args(
        dag_id,
        "Move a __consumer_offsets partition's leadership, restart its broker, or hand over to the trim runbook",
        DOC,
        {
            "group": Param("", type="string", description="a consumer group whose coordinator is stuck (optional)"),
            "partition": Param(-1, type="integer", minimum=-1, description="__consumer_offsets partition (-1: from group)"),
            "action": Param("move_leader", type="string", enum=["move_leader", "restart_broker", "trim_handover"]),
            "target_broker": Param(-1, type="integer", minimum=-1,
                                   description="move_leader: new leader; restart_broker: broker (-1: default)"),
            "replica_order": Param("", type="string",
                                   description="move_leader: the replica order to set, e.g. 3,1,2 (empty: the new "
                                               "leader first, the others in their order); a rollback restores the old one"),
            "evidence_run": Param("", type="string", description="the ownership run whose report the plan "
                                                                 "cites (empty: the newest)"),
        },
        max_active_runs=4,
    ))) as dag:
        planned, _ = approval_gate(COORDINATOR_RECOVERY)

        @task.short_circuit(task_id="changes_the_cluster")
        def changes_the_cluster(params=None) -> bool:
            return params["action"] != "trim_handover"

        @task.short_circuit(task_id="is_trim_handover")
        def is_trim_handover(params=None) -> bool:
            return params["action"] == "trim_handover"

        @task(task_id="trim_conf")
        def trim_conf(params=None, dag=None, run_id=None, dag_run=None) -> dict:
            from fleetkit.core import plans

            from fleet_airflow.gate import plans_root

            plan, _ = plans.load(plans_root(params), dag.dag_id, run_id)
            conf = {"cluster": params["cluster"], "partitions": str(plan["details"]["partition"]),
                    "dry_run": bool(params["dry_run"])}
            # the trim is requested by whoever requested the recovery: named in its conf too (the
            # child run also inherits the triggering user where the execution API passes it on)
            requested_by = (dag_run.conf or {}).get("requested_by") or getattr(dag_run, "triggering_user_name", None)
            if requested_by:
                conf["requested_by"] = requested_by
            return conf

        conf = trim_conf()
        handover = TriggerDagRunOperator(task_id="start_trim_runbook", trigger_dag_id="runbook_trim",
                                         wait_for_completion=False, conf=conf)

        planned >> changes_the_cluster() >> dag.get_task("dry_run_stop")
        planned >> is_trim_handover() >> conf >> handover
    return dag


dag = build()
