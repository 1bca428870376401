"""Operators of the group-id reconciliation (KoP client-to-group mappings, fleetkit.group_ids)."""

from __future__ import annotations

from typing import Any, Sequence

from airflow.providers.common.compat.sdk import AirflowException, BaseOperator

from fleetkit.core.errors import FleetError
from fleetkit.core.fleet import load_fleet
from fleetkit.core.render import visible_controls as v  # names in log lines: one line, nothing hidden

CREATE_ACTION = "create_missing_group_ids"


class CollectGroupIdsOperator(BaseOperator):
    """Read one cluster's mapping znodes (every child of its root, concurrently) and the live members
    of every group; append them to group_id_mappings / group_members, all or nothing."""

    template_fields: Sequence[str] = ("fleet_file", "cluster", "data_root")
    ui_color = "#e8f1fb"

    def __init__(self, *, fleet_file: str, cluster: str, data_root: str, **kwargs):
        super().__init__(**kwargs)
        self.fleet_file, self.cluster, self.data_root = fleet_file, cluster, data_root

    def execute(self, context) -> dict[str, Any]:
        from fleet_airflow import clusters

        try:
            cluster = load_fleet(self.fleet_file).cluster(self.cluster)
            res = clusters.collect_group_ids(cluster, self.data_root)
        except FleetError as e:
            raise AirflowException(str(e)) from None
        self.log.info("%s", res.summary())
        for p in res.problems[:100]:
            self.log.warning("cluster %s: %s", self.cluster, v(p))
        return {"cluster": res.cluster, "observed_at": res.observed_at.isoformat(), "mappings": len(res.mappings),
                "members": len(res.members), "problems": res.problems[:50], "seconds": round(res.seconds, 2)}


class GroupIdReportOperator(BaseOperator):
    """Render report.md from the Spark job's findings, log the counts and every finding."""

    template_fields: Sequence[str] = ("out_dir", "fleet_file")

    def __init__(self, *, out_dir: str, fleet_file: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.out_dir = out_dir
        self.fleet_file = fleet_file  # lists the clusters without mappings (no section; KRaft) in the report

    def execute(self, context) -> dict:
        from fleetkit.group_ids.report import load_findings, render_report

        from fleetkit.core.fleet import load_fleet
        from fleetkit.group_ids.collect import unconfigured

        findings, summary = load_findings(self.out_dir)
        path = render_report(self.out_dir, fleet_file=self.fleet_file or None)
        self.log.info("group-id report: %s", path)
        for cluster, why in unconfigured(load_fleet(self.fleet_file)) if self.fleet_file else []:
            self.log.info("cluster %s: %s", cluster, why)
        for cluster, counts in sorted(summary.get("clusters", {}).items()):
            self.log.info("cluster %s: %s", cluster, ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
        for f in findings[:500]:
            self.log.warning("%s %s path %r group %r znode holds %r (version %s): %s", f["class"], f["cluster"],
                             f["path"], f["group"] if f["group"] is not None else f["groups"], f["znode_group"],
                             f["znode_version"], v(f["reason"]))
        return {"report": str(path), "findings": len(findings), "clusters": summary.get("clusters", {})}


class CreateMissingGroupIdsOperator(BaseOperator):
    """The unattended repair: create the MISSING mappings of clusters whose fleet file allows it
    (group_id_mappings.create_missing_unattended), through the runbook's own executor
    (fleetkit.group_ids.execute.execute_ops) under the runbook engine (fleetkit.core.runbook: the
    cluster's lock, the group_ids journal, the audit chain), like every writer. Members are re-read
    right before; every create fails if the node appeared meanwhile (skipped, reported); the
    journal records every write and the audit the before/after of every path created. Never
    overwrites or deletes anything. The fleet file (which decides `create_missing_unattended`) and
    the data root (where the audit goes) are the deployment's, never a run's."""

    template_fields: Sequence[str] = ("out_dir", "enabled")

    def __init__(self, *, out_dir: str, enabled: Any = True, **kwargs):
        super().__init__(**kwargs)
        self.out_dir, self.enabled = out_dir, enabled

    def execute(self, context) -> dict:
        from fleetkit.core.locks import RUNNING_STATES, ClusterLocked
        from fleetkit.core.runbook import Runbook
        from fleetkit.group_ids.execute import ApplyInterrupted, execute_ops
        from fleetkit.group_ids.report import load_findings
        from fleetkit.group_ids.rules import ops_for

        from fleet_airflow import clusters, settings

        if str(self.enabled).lower() in ("false", "0", "no", "off"):
            self.log.info("create_missing is off for this run: nothing written")
            return {}
        findings, _ = load_findings(self.out_dir)
        fleet = load_fleet(settings.fleet_file())
        clusters.install_state()  # where the locks, journals and audit heads live (FLEET_STATE_CONN_ID)
        dag_id, run_id = context["dag"].dag_id, context["run_id"]
        owner, ti = f"{dag_id}/{run_id}", context["ti"]
        out, failed, stuck_locks = {}, [], []

        def holder_running(holder_dag: str, holder_run: str):
            # the task SDK's view of the holder run (RuntimeTaskInstance, through the execution API)
            if ti.get_dr_count(dag_id=holder_dag, run_ids=[holder_run]) == 0:
                return False, "no such run"
            state = str(ti.get_dagrun_state(dag_id=holder_dag, run_id=holder_run))
            return state in RUNNING_STATES, state
        for cluster in fleet.clusters:
            cfg = cluster.group_id_mappings
            mine = [f for f in findings if f["cluster"] == cluster.name]
            ops = ops_for(mine, ["MISSING"])
            if cfg is None or not ops:
                continue
            if not cfg.create_missing_unattended:
                self.log.info("cluster %s: %d MISSING mapping(s) left for the runbook (create_missing_unattended "
                              "is false)", cluster.name, len(ops))
                continue
            rb = Runbook(capability="group_ids", action=CREATE_ACTION, dag_id=dag_id, run_id=run_id,
                         cluster=cluster.name)
            try:
                with clusters.connected(cluster, changes=True) as (kafka, zk):  # writes: the runbook principal
                    # the cluster's lock, like every writer: never while a runbook changes the cluster;
                    # each write checks the lock is still ours
                    with rb.holding(cluster, kafka, zk, owner, holder_running):
                        res = execute_ops(zk.client, kafka, cluster.name, ops, cfg.root, data_root=rb.data_root,
                                          dag_id=dag_id, run_id=run_id, action=CREATE_ACTION, actor="scheduler",
                                          journal=rb.journal)
            except ClusterLocked as e:
                if e.holder_running is False:
                    self.log.error("cluster %s: %d MISSING mapping(s) not created: %s", cluster.name, len(ops), v(str(e)))
                    stuck_locks.append(cluster.name)
                else:
                    self.log.warning("cluster %s: %d MISSING mapping(s) left for the next run: %s", cluster.name,
                                     len(ops), v(str(e)))
                out[cluster.name] = {"locked": str(e)}
                continue
            except ApplyInterrupted as e:  # execute_ops left the audit record of what was done
                self.log.error("cluster %s: %s", cluster.name, v(str(e)))
                failed.append(cluster.name)
                continue
            except FleetError as e:
                self.log.error("cluster %s: %s", cluster.name, v(str(e)))
                failed.append(cluster.name)
                continue
            for s in res.skipped:
                self.log.warning("cluster %s: skipped %s %r: %s", cluster.name, s["op"], s["path"], v(s["reason"]))
            for c in res.changed:
                self.log.info("cluster %s: created %r = %r", cluster.name, c["path"], c["after"])
            rb.audit("executed", actor="scheduler",
                     message=f"created {len(res.changed)} missing mapping(s), skipped {len(res.skipped)}, "
                             f"refused {len(res.errors)}",
                     details={"result": res.to_dict()})
            out[cluster.name] = res.summary()
        if failed:
            raise AirflowException(f"creating missing mappings failed on cluster(s) {', '.join(failed)} "
                                   "(the audit and the journal record what was done)")
        if stuck_locks:
            raise AirflowException(f"cluster(s) {', '.join(stuck_locks)} locked by a run that no longer runs: "
                                   "nothing created there; see the log for how to clear each lock")
        return out
