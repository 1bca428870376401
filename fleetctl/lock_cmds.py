"""fleetctl lock: the per-cluster locks of the destructive runbooks (status, a checked clear)."""

from __future__ import annotations

import sys

from fleetctl.connect import actor, state_store
from fleetctl.output import FLAGGED, OK, add_json, print_json, with_examples


def _lock_dir(args) -> str:
    """--lock-dir, else the deployment's lock folder (FLEET_LOCK_DIR, else $AIRFLOW_HOME/locks): the
    one the workers use."""
    from fleetkit.core import settings

    return args.lock_dir or settings.lock_dir()


def cmd_lock_status(args) -> int:
    """Every held lock: cluster, holder run, since, identity (exit 3 when one is held)."""
    from fleetkit.core.locks import held_locks, locks_where
    from fleetkit.core.render import visible_controls

    store = state_store()  # the lock folder, or the shared run state's database (FLEET_STATE_CONN_ID)
    lock_dir = _lock_dir(args)
    held = held_locks(lock_dir)
    if args.json:
        print_json({"where": locks_where(lock_dir), "locks": [dict(h, where=store.lock_where(ref)) for ref, h in held]})
        return FLAGGED if held else OK
    if not held:
        print(f"no cluster is locked ({locks_where(lock_dir)})")
        return OK
    for ref, h in held:
        print("\t".join(visible_controls(str(x)) for x in (
            h.get("cluster", "?"), f"dag={h.get('dag_id', '?')}", f"run={h.get('run_id', '?')}",
            f"since={h.get('since', '?')}", f"host={h.get('host', '?')}", f"pid={h.get('pid', '?')}",
            f"identity={h.get('identity', '?')}", store.lock_where(ref))))
    return FLAGGED


def cmd_lock_clear(args) -> int:
    """Clear the lock of a cluster (by the name or identity its holder recorded), after checking the
    cluster: never while the holder run is queued or running (asked of Airflow as the caller); with
    --force when it no longer runs or Airflow cannot be asked. The lock is kept as a record (the lock
    file moved to <lock folder>/cleared/, or its row to the cleared_locks table) and the clearing is
    audited on the holder run."""
    from fleetkit.core.locks import cli_holder_alive, find_locks
    from fleetkit.core.render import visible_controls
    from fleetkit.core.runbook import Runbook, run_state_problem

    from fleetctl.airflow_api import run_state_or_none

    from fleetkit.core.locks import locks_where

    state_store()  # the lock folder, or the shared run state's database (FLEET_STATE_CONN_ID)
    lock_dir = _lock_dir(args)
    locks = find_locks(lock_dir, args.cluster)
    if not locks:
        print(f"error: no lock held for cluster {visible_controls(args.cluster)!r} in {locks_where(lock_dir)} "
              "(fleetctl lock status lists the held locks)", file=sys.stderr)
        return 2
    refused = 0
    for lock in locks:
        h = lock.holder() or {}
        dag_id, run_id = str(h.get("dag_id") or ""), str(h.get("run_id") or "")
        what = (f"the lock of cluster {visible_controls(str(h.get('cluster')))!r} held by DAG "
                f"{visible_controls(dag_id)!r} run {visible_controls(run_id)!r}")
        if h.get("kind") == "cli":
            # a fleetctl process (trim resume / restore) acting on a finished run: its Airflow run reads
            # as ended, the process is what holds the lock
            alive = cli_holder_alive(h)
            holder = f"{visible_controls(str(h.get('owner')))} (pid {h.get('pid')} on {visible_controls(str(h.get('host')))})"
            if alive:
                print(f"error: {what} is held by a running fleetctl: {holder}; it is acting on the cluster now: "
                      "never cleared while it runs (stop it, or wait for it to end)", file=sys.stderr)
                refused += 1
                continue
            if alive is None and not args.force:
                print(f"error: {what} is held by fleetctl on another host: {holder}; whether it still runs cannot be "
                      "told from here: check that host (or clear it there), then add --force", file=sys.stderr)
                refused += 1
                continue
        state, why_unknown = run_state_or_none(dag_id, run_id) if dag_id and run_id else ("no such run", "")
        problem = run_state_problem(state, what, args.force, unknown_run_ok=True)  # a lock left by a lost run
        if problem is None and not args.force:
            problem = (f"{what}: its run is {state}; it may have left the cluster half-changed (see its audit records "
                       "and journal). After checking the cluster, clear it with --force")
        if problem:
            print(f"error: {problem}" + (f" ({visible_controls(why_unknown)})" if state is None else ""), file=sys.stderr)
            refused += 1
            continue
        # audited before the lock moves: a clear the audit cannot record does not happen
        Runbook(capability="lock", action="cluster_lock", dag_id=dag_id or "-", run_id=run_id or "-",
                cluster=str(h.get("cluster") or args.cluster), lock_dir=lock_dir).audit(
            "lock_cleared", actor=actor(),
            message=f"fleetctl lock clear --force: the lock of {h.get('identity')} held since {h.get('since')} cleared "
                    f"(holder run state: {state or 'unknown: ' + why_unknown})",
            details={"holder": h, "holder_state": state, "lock_file": lock.where})
        cleared = lock.clear()
        if cleared is None:
            print(f"{what}: already released (audited as cleared)")
            continue
        print(f"cleared {what} since {h.get('since')} ({h.get('identity')}); kept in {lock.cleared_where}; "
              "audited")
    return 2 if refused else 0


def add_parser(sub) -> None:
    lk = sub.add_parser("lock", help="the per-cluster locks of the destructive runbooks")
    lk_sub = lk.add_subparsers(dest="lock_command", required=True)
    ls_ = lk_sub.add_parser("status", help="the held locks: cluster, holder run, since (exit 3 when one is held)")
    ls_.add_argument("--lock-dir", help="lock folder (default: $FLEET_LOCK_DIR, else $AIRFLOW_HOME/locks; unused "
                                        "when FLEET_STATE_CONN_ID keeps the locks in the database)")
    add_json(ls_)
    with_examples(ls_, "example:\n  fleetctl lock status")
    ls_.set_defaults(func=cmd_lock_status)
    lc = lk_sub.add_parser("clear", help="clear a cluster's lock after checking the cluster: refused while its holder "
                                         "run is queued or running (asked of Airflow as you: FLEET_AIRFLOW_USER); "
                                         "needs --force; audited")
    lc.add_argument("cluster", help="the cluster name (or identity) the lock's holder recorded")
    lc.add_argument("--force", action="store_true", help="clear it (the holder run no longer runs, or Airflow cannot "
                                                         "be asked and you checked the run yourself)")
    lc.add_argument("--lock-dir", help="lock folder (default: $FLEET_LOCK_DIR, else $AIRFLOW_HOME/locks; unused "
                                       "when FLEET_STATE_CONN_ID keeps the locks in the database)")
    with_examples(lc, "examples:\n  fleetctl lock clear lab            # refused while its holder still runs\n  fleetctl lock clear lab --force    # its holder is gone and you checked the cluster")
    lc.set_defaults(func=cmd_lock_clear)
