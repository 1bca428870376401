"""A destructive action as the approval gate runs it: plan, preconditions, execute, verify and the
approval page's table, as plain functions over a ClusterContext. No Airflow here: each
capability exports its actions (fleetkit.<capability>.action), plugins/ only adapts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class ClusterContext:
    """What an action gets: the fleet-file cluster and connected readers (a KafkaCluster and, for
    ZooKeeper-mode clusters, a ZooKeeperCluster or None)."""

    cluster: Any
    kafka: Any
    zk: Any
    journal_path: Any = None  # where execute journals each change (core.journal); None outside a run
    # opens a (not yet started) ZooKeeperCluster of one of the cluster's offset_stores
    open_zookeeper: Any = None
    # opens a KafkaCluster on the runbook principal's connection (the caller closes it), for a plan
    # that must read what only that principal may: the record at a committed offset where the
    # read-only principal has no Read on data topics (Kafka 0.9, where Read on a group and a topic
    # would also let it commit)
    open_runbook_kafka: Any = None
    # where each broker's files are and its broker_control commands run
    # (fleetkit.clients.broker_hosts.BrokerHosts: this machine, or the broker's host over SSH);
    # None: every broker on this machine
    broker_hosts: Any = None
    # told progress(done, total, unit) as a long action advances (fleetctl's progress bar); None: nobody
    progress: Any = None

    def advanced(self, done: int, total: int, unit: str) -> None:
        if self.progress is not None:
            self.progress(done, total, unit)


def lazy(module: str, function: str) -> Callable:
    """`module`.`function`, imported at its first call: a capability's stages (plan, execute,
    verify) load only when the action runs, not when the DAGs that list it are parsed."""
    def call(*args, **kwargs):
        import importlib

        return getattr(importlib.import_module(module), function)(*args, **kwargs)

    call.__qualname__ = f"{module}.{function}"
    return call


def _no_table(plan: dict) -> dict | None:
    return None


def _no_teardown(ctx: ClusterContext, plan: dict) -> list[str]:
    return []


@dataclass(frozen=True)
class Action:
    """A destructive action. Each callable takes a ClusterContext (plan also the run's params)."""

    name: str
    capability: str  # the package it belongs to (stuck, trim, ownership, group_ids): its journal folder
    plan: Callable[[ClusterContext, dict], dict]
    check: Callable[[ClusterContext, dict], list[str]]  # the preconditions that no longer hold
    execute: Callable[[ClusterContext, dict], dict]
    verify: Callable[[ClusterContext, dict, dict], list[str]]  # (ctx, plan, execute's result)
    details_table: Callable[[dict], dict | None] = _no_table
    # runs after execute whatever happened to it (failed, killed, skipped after approval): puts the
    # cluster back into service (e.g. starts a broker the trim stopped); returns what it did
    teardown: Callable[[ClusterContext, dict], list[str]] = _no_teardown
