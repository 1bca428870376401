"""runbook_trim: lossless trimming of bloated __consumer_offsets partitions."""

from __future__ import annotations

from airflow.sdk import DAG, Param

from fleet_airflow.actions import TRIM_OFFSETS
from fleet_airflow.dag_files import dag_kwargs
from fleet_airflow.gate import approval_gate, runbook_dag_args
from fleet_airflow.operators.collect import CollectOffsetsTopicOperator
from fleet_airflow.operators.spark import spark_job_operator

DOC = """
### Trim bloated `__consumer_offsets` partitions (incident runbook, destructive)

The incident: on a broker before 0.10.1 the log cleaner dies on a segment holding more messages
than its dedupe map fits (KAFKA-3894), `__consumer_offsets` is never compacted again, grows to
hundreds of GB, and a new leader spends hours loading it while its groups get "not coordinator".
Deleting old segments by hand silently drops the newest committed offset of every group that has
not committed since. This runbook does it without losing an offset:

1. **collect_offsets**: new `__consumer_offsets` records (incremental) and the segment inventory;
2. **trim_health** (Spark): verdict per replica (HEALTHY, BLOATED, CLEANER_STALLED,
   OVER_CAPACITY) with the cleaner setting that fixes it;
3. **trim plan** (in the same Spark application, `--trim-plan`): per unhealthy replica the segments to quarantine (all rolled segments
   but the newest; never the active one), the bytes freed, and the live keys whose newest record
   is only in them: offsets of Empty groups are re-committed after the trim, those of active groups
   listed, group-metadata keys listed (those groups rebalance). A shell runbook per broker
   (`runbook-broker-N.sh`, every path quoted) is written next to the plan;
4. **plan / approve** (the approval gate, dry run by default);
5. **execute** (lab fleet): re-checks the segments and the ISR, applies the cleaner fix, then broker
   by broker, **followers first and the current leader last**: stop, move the segment files (with
   SHA-256) to the quarantine (`<quarantine>/<run>/broker-N/__consumer_offsets-P/`), start, wait for
   the ISR; then re-commits, never setting a group back (a group whose committed offset moved after
   the plan was read is skipped and reported). Every file move is journaled (source, destination,
   size, SHA-256) before it is made;
6. **verify**: no group's committed offset is lost or behind the one read before the trim;
7. **cleanup** (teardown, whatever happened to execute): starts any broker of the plan left stopped.

An interrupted execute (failed, killed) is finished from its plan and journal with
`fleetctl trim resume RUN --execute`; `fleetctl trim restore RUN --execute` puts the quarantined
files back byte for byte. Both are dry runs without `--execute` and act only on an approved plan.
Params: `cluster`, `partitions` (`all-unhealthy` or `3,7`), `dry_run` (default true).
"""

OUT = "{{ fleet_settings.data_root }}/reports/trim/{{ run_id | run_folder_name }}"


def build(dag_id: str = "runbook_trim"):
    """The runbook under `dag_id`: its own, or an old one of fleet_airflow.dag_files.RENAMED (the
    deprecated alias, the same tasks)."""
    with DAG(**dag_kwargs(runbook_dag_args(
        dag_id,
        "Trim bloated __consumer_offsets partitions without losing an offset (approval required)",
        DOC,
        {
            "partitions": Param("all-unhealthy", type="string", pattern=r"^(all-unhealthy|\d+(,\d+)*)$"),
            "min_bloat_bytes": Param(64 * 1024 * 1024, type="integer", minimum=0),
            "bloat_ratio": Param(10.0, type="number", minimum=1),
        },
    ))) as dag:
        collect = CollectOffsetsTopicOperator(
            task_id="collect_offsets", fleet_file="{{ fleet_settings.fleet_file }}", cluster="{{ params.cluster }}",
            data_root="{{ fleet_settings.data_root }}", partitions="all")
        health = spark_job_operator(
            "trim_health", "trim_health",
            ["--data-root", "{{ fleet_settings.data_root }}", "--fleet", "{{ fleet_settings.fleet_file }}",
             "--out", OUT, "--bloat-ratio", "{{ params.bloat_ratio }}",
             "--min-bloat-bytes", "{{ params.min_bloat_bytes }}",
             "--trim-plan", "--partitions", "{{ params.partitions }}"],
            in_process_input="--data-root")
        first, _ = approval_gate(TRIM_OFFSETS)
        collect >> health >> first
    return dag


dag = build()
