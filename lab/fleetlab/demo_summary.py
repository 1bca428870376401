"""Print where to look after `make demo`: the UI, the login, the datasets and what they hold."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from fleetkit.core.datasets import SCHEMAS, DataRoot, read_dataset

from fleet_airflow import settings
from fleetlab import airflow_services as services


def stuck_run_dir(root: DataRoot, run_id: str | None):
    """The stuck report folder of `run_id` (the demo's final run), else the newest one: a DataPath,
    on a local data root and an object store alike."""
    from fleetkit.core.datasets import newest_in_runs
    from fleetkit.core.settings import run_folder

    base = root / "reports" / "stuck"
    if run_id is not None:
        folder = run_folder(base, run_id)
        return folder if (folder / "report.md").exists() else None
    newest = newest_in_runs(base, "report.md")
    return newest.parent if newest is not None else None


def flagged_lines(run_dir: Path, limit: int = 12) -> list[str]:
    """One line per flagged partition of a stuck report folder (the first `limit`)."""
    from fleetkit.stuck.report import StuckReport

    return [f"  {f['status']:<13} {f.get('cluster', ''):<7} {f['group']:<16} {f['topic']}-{f['partition']}  "
            f"lag {f['lag']}" for f in StuckReport.load(run_dir).flagged()[:limit]]


def main(stuck_run: str | None = None, runs: dict | None = None) -> None:
    """The summary; `stuck_run` names the fleet_maintenance run whose stuck report is shown (default:
    the newest report), `runs` the demo's run ids (fleetlab.demo)."""
    root = DataRoot(settings.data_root())
    pw = services.passwords()
    print()
    print("=" * 72)
    print(f"Airflow UI     http://{services.api_host()}:{services.API_PORT}")
    pw_file = services.airflow_home() / "simple_auth_manager_passwords.json.generated"
    for user in services.USERS:
        print(f"login          {user} / {pw.get(user, f'(see {pw_file})')}")
    if runs:
        print(f"DAG            fleet_maintenance (every 5 minutes): run 1 {runs['first']} made the first collection, "
              f"run 2 {runs['final']} (window {runs.get('window', '2m')}) the verdicts below; offsets health "
              f"in run 2 after its verdicts")
        print(f"               ownership run {runs['coordinator']}")
    else:
        print("DAG            fleet_maintenance (every 5 minutes; window 2m in the demo's runs)")
    print(f"datasets       {root.uri}")
    for name in SCHEMAS:
        files = root.files(name)
        print(f"  {name:<20} {len(files)} file(s)")
    for spec in services.lab_specs():
        name = spec.name
        snaps = read_dataset(root, "offsets_snapshots", name)
        if not snaps.num_rows:
            print(f"latest collection of cluster {name} (Kafka {spec.kafka_version}, {spec.mode}): none")
            continue
        rows_all = snaps.to_pylist()
        newest = max(r["observed_at"] for r in rows_all)
        latest = [r for r in rows_all if r["observed_at"] == newest]
        states = Counter((r["group"], r["group_state"]) for r in latest)
        print(f"latest collection of cluster {name} (Kafka {spec.kafka_version}, {spec.mode}; "
              f"{newest:%Y-%m-%d %H:%M:%S} UTC):")
        for (group, state), n in sorted(states.items()):
            rows = [r for r in latest if r["group"] == group]
            lag = sum((r["log_end_offset"] or 0) - (r["committed_offset"] or 0) for r in rows)
            print(f"  {group:<16} {state:<20} {n} partition(s), total lag {lag}")
    run_dir = stuck_run_dir(root, stuck_run)
    if run_dir is not None:
        from urllib.parse import quote

        print(f"stuck report   http://{services.api_host()}:{services.API_PORT}/fleet-reports/stuck/"
              f"{quote(run_dir.name)}/report.html")
        print(f"               {run_dir / 'report.html'}")
        for line in flagged_lines(run_dir):
            print(line)
    print(f"fleet page     http://{services.api_host()}:{services.API_PORT}/fleet/ (\"Kafka fleet\" in the UI's navigation: "
          "groups by verdict, lag charts, a prefilled runbook form per flagged partition)")
    print(f"metrics        http://{services.api_host()}:{services.API_PORT}/fleet/metrics (Prometheus; a Bearer token from "
          f"/auth/token); scrape config: - {{job_name: kafka-fleet, metrics_path: /fleet/metrics, "
          f"authorization: {{credentials_file: TOKEN_FILE}}, static_configs: [{{targets: "
          f"[\"{services.api_host()}:{services.API_PORT}\"]}}]}} (docs/metrics.md)")
    # the clusters this Airflow reaches: the lab fleet (0.9 first, 4.3 for lag), or the hosts profile's one
    names = [spec.name for spec in services.lab_specs()]
    first, modern = (names[0], names[-1]) if len(names) == 1 else ("lab", "lab43")
    print("incident CLI   eval \"$(.venv/bin/fleetlab env)\" (the lab's deployment settings), then "
          f".venv/bin/fleetctl stuck --cluster {first}; .venv/bin/fleetctl lag --all --cluster {modern} "
          "(README: During an incident)")
    print("runbooks       runbook_stuck_skip, runbook_stuck_reset, runbook_trim, "
          "runbook_ownership, runbook_group_ids (dry run by default; approval required); "
          "FLEET_AIRFLOW_USER=admin .venv/bin/fleetctl runbook list")
    print("approving      the user who triggers a runbook cannot approve it: trigger as admin, then log in as "
          "approver (a private window, or log out first) and answer under Browse > Required Actions; "
          f"approvers are the fleet file's `approvers` ({settings.fleet_file()}); passwords: {pw_file}")
    print("coordinators   ownership starts by itself when a __consumer_offsets leader changes "
          f"(stop the leader that `.venv/bin/fleetctl coordinator who GROUP --cluster {first}` names: "
          "`.venv/bin/fleetlab stop-broker N`); report: "
          f"{root.uri}/reports/coordinator/latest/report.md")
    print(f"offsets health {root.uri}/reports/offsets/<run>/offsets_health.md (hourly, or offsets_health=always)")
    print("lab            `.venv/bin/fleetlab status`; stop everything with `make stop`")
    print("=" * 72)


if __name__ == "__main__":
    main()
