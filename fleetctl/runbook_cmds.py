"""fleetctl runbook: list, start and follow the destructive runbooks through Airflow's REST API, as
the caller's own Airflow identity (fleetctl.airflow_api: a token of theirs, or their user and
password), never a shared account and never Airflow's internals. Airflow records the caller as the
run's requester: they may not approve it (a listed approver who did not ask does, in the UI).

A run starts as a dry run (the runbook's `dry_run` param) unless --execute: a dry run plans,
renders and stops; a real run waits for an approval before it changes anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse

from fleetkit.core.errors import FleetError
from fleetkit.core.render import visible_controls

from fleetctl.output import FLAGGED, print_table, red

#: the tag every destructive runbook carries (fleet_airflow.gate.runbook_dag_args)
RUNBOOK_TAG = "runbook"
ENDED = ("success", "failed")


def _q(s: str) -> str:
    return urllib.parse.quote(str(s), safe="")


def _session():
    from fleetctl.airflow_api import login

    return login()


def _runbooks(session) -> list[dict]:
    doc = session.api("GET", f"/api/v2/dags?tags={RUNBOOK_TAG}&limit=100&order_by=dag_id")
    return doc.get("dags") or []


def _params(session, dag_id: str) -> dict:
    """name -> {"default": ..., "description": ...} of a DAG's params (its details)."""
    doc = session.api("GET", f"/api/v2/dags/{_q(dag_id)}/details")
    out = {}
    for name, p in (doc.get("params") or {}).items():
        p = p if isinstance(p, dict) else {"value": p}
        out[name] = {"default": p.get("value"), "description": p.get("description") or ""}
    return out


def cmd_runbook_list(args) -> int:
    """The runbooks this Airflow has, whether each is paused, and what its form asks for."""
    session = _session()
    dags = _runbooks(session)
    rows = []
    for d in dags:
        params = _params(session, d["dag_id"])
        rows.append({"dag_id": d["dag_id"], "paused": bool(d.get("is_paused")),
                     "description": d.get("description") or "",
                     "params": {k: v["default"] for k, v in params.items()}})
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True, default=str))
        return 0
    if not rows:
        print(f"no DAG tagged {RUNBOOK_TAG!r} in Airflow at {_base()} (are the toolkit's DAG files in its dags "
              "folder? fleetctl deploy dags)")
        return 0
    print_table(["RUNBOOK", "PAUSED", "PARAMS (default)", "DESCRIPTION"],
                [[visible_controls(r["dag_id"]), "yes" if r["paused"] else "no",
                  " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in r["params"].items()),
                  visible_controls(r["description"])] for r in rows])
    return 0


def _base() -> str:
    from fleetctl.airflow_api import base_url

    return base_url()


def _conf(args) -> dict:
    conf: dict = {}
    if args.conf:
        try:
            conf = json.loads(args.conf)
        except ValueError as e:
            raise FleetError(f"--conf {args.conf!r}: not JSON ({e})") from None
        if not isinstance(conf, dict):
            raise FleetError(f"--conf {args.conf!r}: must be a JSON object")
    for item in args.param or []:
        if "=" not in item:
            raise FleetError(f"--param {item!r}: write it as name=value")
        name, value = item.split("=", 1)
        try:
            conf[name] = json.loads(value)  # numbers, booleans, null as JSON ...
        except ValueError:
            conf[name] = value  # ... anything else as text
    if args.cluster:
        conf["cluster"] = args.cluster
    if getattr(args, "offsets_csv", None):  # kafka-consumer-groups' --from-file: a restore of those offsets
        from fleetkit.stuck.plan import offsets_from_csv

        try:
            with open(args.offsets_csv) as f:
                text = f.read()
        except OSError as e:
            raise FleetError(f"--offsets-csv {args.offsets_csv!r}: {e.strerror or e}") from None
        conf.update(target="restore", offsets=offsets_from_csv(text, str(conf.get("group") or ""),
                                                               str(conf.get("topic") or "")),
                    partitions="all")
    if args.execute:
        conf["dry_run"] = False
    conf.setdefault("dry_run", True)
    return conf


def _run_url(dag_id: str, run_id: str) -> str:
    return f"{_base()}/dags/{_q(dag_id)}/runs/{_q(run_id)}"


def cmd_runbook_start(args) -> int:
    """Trigger a runbook as the caller (a dry run unless --execute); with --wait, follow it until it
    ends or waits for an approval."""
    conf = _conf(args)
    session = _session()
    dag = session.api("GET", f"/api/v2/dags/{_q(args.dag_id)}")
    if RUNBOOK_TAG not in {t.get("name") if isinstance(t, dict) else t for t in dag.get("tags") or []}:
        raise FleetError(f"{args.dag_id!r} is not a runbook (no {RUNBOOK_TAG!r} tag): fleetctl runbook list names them")
    if dag.get("is_paused"):
        if not args.unpause:
            print(red(f"warning: {args.dag_id} is paused: the run waits until it is unpaused (--unpause, or the "
                      "Airflow UI)"), file=sys.stderr)
        else:
            session.api("PATCH", f"/api/v2/dags/{_q(args.dag_id)}", {"is_paused": False})
    run = session.api("POST", f"/api/v2/dags/{_q(args.dag_id)}/dagRuns", {"logical_date": None, "conf": conf})
    run_id = run["dag_run_id"]
    kind = "dry run" if conf.get("dry_run") else "run (it waits for an approval before changing anything)"
    print(f"started {args.dag_id} {kind} as {session.user}: {run_id}")
    print(f"  follow: fleetctl runbook status {args.dag_id} {run_id}   or {_run_url(args.dag_id, run_id)}")
    if not args.wait:
        return 0
    return _follow(session, args.dag_id, run_id, args.timeout)


def cmd_runbook_plan(args) -> int:
    """The plan a run stored: its title, digest and changes; --csv a reset's offsets as
    kafka-consumer-groups' CSV; --json the plan as stored. Read from the plans folder, no Airflow."""
    from fleetkit.core import plans, settings
    from fleetkit.stuck.plan import ACTION, plan_csv

    plan, digest = plans.load(settings.plans_root(args.data_root), args.dag_id, args.run_id)  # PlanError: named
    if args.csv:
        if plan.get("action") != ACTION:
            raise FleetError(f"--csv is for a reset's plan ({ACTION}); this one is {plan.get('action')!r}")
        sys.stdout.write(plan_csv(plan))
    elif args.json:
        print(json.dumps({"digest": digest, "plan": plan}, indent=1, ensure_ascii=False, default=str))
    else:
        print(f"{visible_controls(plan.get('title') or '')}\ndigest {digest}")
        print_table(["TARGET", "BEFORE", "AFTER"], [[str(c.get("target")), str(c.get("before")), str(c.get("after"))]
                                                   for c in plan.get("changes") or []])
    return 0


def _pending_approvals(session, dag_id: str, run_id: str) -> list[dict]:
    """The run's approvals still waiting for an answer ([] where this Airflow has no such route)."""
    try:
        doc = session.api("GET", f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/hitlDetails"
                                 "?response_received=false")
    except FleetError as e:
        if "HTTP 404" in str(e):
            return []
        raise
    return doc.get("hitl_details") or []


def _follow(session, dag_id: str, run_id: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    last = None
    while True:
        state = session.api("GET", f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}")["state"]
        if state != last:
            print(f"  {run_id}: {state}", flush=True)
            last = state
        if state in ENDED:
            return 0 if state == "success" else FLAGGED
        pending = _pending_approvals(session, dag_id, run_id)
        if pending:
            task = pending[0].get("task_instance", {}) or {}
            print(f"  waiting for an approval ({task.get('task_id') or 'approve'}): an approver who did not ask "
                  f"answers it in the Airflow UI, Browse > Required Actions, or {_run_url(dag_id, run_id)}")
            return 0
        if time.monotonic() > deadline:
            print(red(f"error: {run_id} is still {state} after {timeout:.0f}s"), file=sys.stderr)
            return FLAGGED
        time.sleep(2)


def cmd_runbook_status(args) -> int:
    """A run's state, its tasks and any approval it waits for; without RUN, the runbook's recent runs."""
    session = _session()
    if not args.run_id:
        doc = session.api("GET", f"/api/v2/dags/{_q(args.dag_id)}/dagRuns?order_by=-run_after&limit={args.limit}")
        runs = doc.get("dag_runs") or []
        if args.json:
            print(json.dumps(runs, indent=2, sort_keys=True, default=str))
            return 0
        print_table(["RUN", "STATE", "AFTER", "BY", "CONF"],
                    [[visible_controls(r.get("dag_run_id")), r.get("state") or "-", r.get("run_after") or "-",
                      visible_controls(r.get("triggering_user_name") or r.get("triggered_by") or "-"),
                      visible_controls(json.dumps(r.get("conf") or {}, sort_keys=True))] for r in runs])
        return 0
    run = session.api("GET", f"/api/v2/dags/{_q(args.dag_id)}/dagRuns/{_q(args.run_id)}")
    tis = session.api("GET", f"/api/v2/dags/{_q(args.dag_id)}/dagRuns/{_q(args.run_id)}/taskInstances"
                             "?limit=100").get("task_instances") or []
    pending = _pending_approvals(session, args.dag_id, args.run_id)
    if args.json:
        print(json.dumps({"run": run, "task_instances": tis, "pending_approvals": pending}, indent=2,
                         sort_keys=True, default=str))
    else:
        print(f"{args.dag_id} {visible_controls(args.run_id)}: {run.get('state')} "
              f"(requested by {visible_controls(run.get('triggering_user_name') or '-')}; "
              f"conf {visible_controls(json.dumps(run.get('conf') or {}, sort_keys=True))})")
        print_table(["TASK", "MAP", "STATE"], [[t.get("task_id"), str(t.get("map_index", -1)), t.get("state") or "-"]
                                               for t in sorted(tis, key=lambda t: (t.get("start_date") or "~",
                                                                                  t.get("task_id") or ""))])
        for p in pending:
            users = ", ".join(visible_controls(u.get("name") or u.get("id") or "?") for u in p.get("assigned_users") or [])
            print(f"waiting for an approval: {visible_controls(p.get('subject') or '')} (assigned to "
                  f"{users or 'the approvers'}) at {_run_url(args.dag_id, args.run_id)}")
    return FLAGGED if run.get("state") == "failed" else 0


EPILOG_LIST = "example:\n  fleetctl runbook list"
EPILOG_START = ("examples:\n"
                "  fleetctl runbook start runbook_stuck_skip --cluster prod-eu --param group=billing "
                "--param topic=orders --param partition=3 --wait\n"
                "  fleetctl runbook start runbook_stuck_reset --conf '{\"cluster\": \"prod-eu\", \"group\": "
                "\"billing\", \"topic\": \"orders\", \"target\": \"latest\"}' --execute")
EPILOG_PLAN = ("examples:\n  fleetctl runbook plan runbook_stuck_reset 'manual__2026-11-28T10:00:00+00:00'\n"
               "  fleetctl runbook plan runbook_stuck_reset RUN --csv > offsets.csv   # kafka-consumer-groups' "
               "--export format")
EPILOG_STATUS = ("examples:\n  fleetctl runbook status runbook_trim\n"
                 "  fleetctl runbook status runbook_trim 'manual__2026-11-28T10:00:00+00:00' --json")


def add_parser(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    rb = sub.add_parser("runbook", help="list, start and follow runbooks through Airflow's REST API, as you",
                        description=__doc__, formatter_class=fmt)
    rsub = rb.add_subparsers(dest="runbook_command", required=True)
    ls = rsub.add_parser("list", help="the runbooks, paused or not, and their params", epilog=EPILOG_LIST,
                         formatter_class=fmt)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_runbook_list)
    st = rsub.add_parser("start", help="trigger a runbook as you (a dry run unless --execute)", epilog=EPILOG_START,
                         formatter_class=fmt)
    st.add_argument("dag_id", help="the runbook (fleetctl runbook list)")
    st.add_argument("--cluster", help="the cluster (its `cluster` param)")
    st.add_argument("--param", action="append", metavar="NAME=VALUE", help="a param (JSON value, else text); repeat")
    st.add_argument("--conf", help="the params as one JSON object (--param and --cluster win)")
    st.add_argument("--offsets-csv", metavar="FILE", help="runbook_stuck_reset: the offsets of a CSV as "
                                                           "kafka-consumer-groups --export writes it (topic,partition,"
                                                           "offset): target restore")
    st.add_argument("--execute", action="store_true", help="a real run (dry_run false): it waits for an approval")
    st.add_argument("--unpause", action="store_true", help="unpause the runbook first (needs edit rights on it)")
    st.add_argument("--wait", action="store_true", help="follow it until it ends or waits for an approval")
    st.add_argument("--timeout", type=float, default=1800.0, help="seconds --wait follows it (default 1800)")
    st.set_defaults(func=cmd_runbook_start)
    sp = rsub.add_parser("plan", help="the plan a run stored (what its approval page shows)", epilog=EPILOG_PLAN,
                         formatter_class=fmt)
    sp.add_argument("dag_id")
    sp.add_argument("run_id")
    sp.add_argument("--data-root", help="where the runs keep their plans (default: $FLEET_DATA_ROOT)")
    sp.add_argument("--csv", action="store_true", help="a reset's new offsets as kafka-consumer-groups' CSV")
    sp.add_argument("--json", action="store_true", help="the whole plan as stored")
    sp.set_defaults(func=cmd_runbook_plan)
    ss = rsub.add_parser("status", help="a run's state, tasks and pending approval; without RUN, the recent runs",
                         epilog=EPILOG_STATUS, formatter_class=fmt)
    ss.add_argument("dag_id")
    ss.add_argument("run_id", nargs="?")
    ss.add_argument("--limit", type=int, default=10, help="recent runs shown without RUN (default 10)")
    ss.add_argument("--json", action="store_true")
    ss.set_defaults(func=cmd_runbook_status)
