"""runbook_stuck_reset: move a stopped group's committed offsets, behind an approval."""

from __future__ import annotations

from airflow.sdk import DAG, Param

from fleet_airflow.actions import RESET_OFFSETS
from fleet_airflow.dag_files import dag_kwargs
from fleet_airflow.gate import approval_gate, runbook_dag_args

DOC = """
### Reset a consumer group's offsets (incident runbook, destructive)

The fix for a consumer **stuck on a poison record** (alive, committed offset frozen): stop the
consumers, then move the group's committed offset past the record with target `skip 1`.

**Params**: `cluster`, `group`, `topic`, `partitions` (`all` or `0,2`), `target`:
`earliest` | `latest` | `offset N` | `skip N` (records forward from the committed offset) |
`shift N` (forward or back, kept within the log) | `datetime 2026-11-29T10:00:00Z` (the first
record at or after it) | `duration 2h` (the same, 2 h ago) |
`restore` (with `offsets` = `{"0": 17, "1": 20}`, what a rollback uses); `dry_run` (default
**true**: plan and render only).

**Flow**: `plan` reads the committed offsets, log start/end and the group state and stores the
plan (digest shown) -> `dry_run_stop` -> `approve` (Browse > Required Actions, or the task's
page: Approve / Reject; no answer in 4 h = Reject) -> `lock` (one destructive runbook per
cluster) -> `execute` (refuses unless the approved digest matches the stored plan and the group
is still Empty/Dead with the same committed offsets) -> `verify` (reads the offsets back) ->
`unlock`. Every step is in the audit dataset.

**Offsets kept in ZooKeeper** (`source` zookeeper or storm, from the cluster's `offset_stores`):
each znode is written with a version check; `execute` refuses when a member registered under
`/consumers/<group>/ids` or a znode's version changed since the plan. For a Storm spout (`group`
= the spout id) the topology must not run (a live one overwrites the reset at its next commit):
the plan reads whether it runs from Storm's own znodes (the store's `storm_root`, the topology
id in the spout's JSON) and `execute` refuses while it runs, re-read right before writing; only
when Storm's state there cannot tell does the plan need `topology_deactivated` true. Only the
JSON's `offset` changes.

**Roll back**: the `executed` audit record holds the previous offsets:
`fleetctl audit rollback RECORD_ID` triggers this runbook with target `restore`.
"""


def build(dag_id: str = "runbook_stuck_reset"):
    """The runbook under `dag_id`: its own, or an old one of fleet_airflow.dag_files.RENAMED (the
    deprecated alias, the same tasks)."""
    with DAG(**dag_kwargs(runbook_dag_args(
        dag_id,
        "Reset a stopped consumer group's committed offsets (approval required)",
        DOC,
        {
            "group": Param("", type="string", minLength=1, description="consumer group id (exactly as the cluster has it)"),
            "topic": Param("", type="string", minLength=1, description="topic"),
            "partitions": Param("all", type="string", description="'all' or partition numbers like 0,2"),
            "target": Param("skip 1", type="string", description="earliest | latest | offset N | skip N | shift N | datetime T | "
                                                                  "duration D | restore"),
            "offsets": Param({}, type="object", description="for target restore: {partition: offset}"),
            "source": Param("kafka", type="string", enum=["kafka", "zookeeper", "storm"],
                            description="where the offsets live: kafka, zookeeper (old consumer) or storm (spout id "
                                        "as group); the store comes from the cluster's offset_stores"),
            "store_root": Param("", type="string", description="zookeeper/storm: the store's root when the cluster "
                                                               "declares several of that kind"),
            "topology_deactivated": Param(False, type="boolean",
                                          description="storm: I confirm the topology is deactivated (required "
                                                      "only when Storm's state cannot tell whether it runs)"),
        },
        max_active_runs=4,
    ))) as dag:
        approval_gate(RESET_OFFSETS)
    return dag


dag = build()
