"""StuckReportOperator: render the stuck-partitions report of a run, log it, link it, alert.

Groups, topics and reasons come from the clusters: they are logged through
fleetkit.core.render.visible_controls (one line each, nothing hidden) and reach the alert
notifier as data (never as templates)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from airflow.providers.common.compat.sdk import BaseOperator, BaseOperatorLink

from fleetkit.core.fleet import load_fleet
from fleetkit.core.render import visible_controls as v
from fleetkit.stuck.report import StuckReport

from fleet_airflow.notifiers import FleetAlertNotifier

REPORT_XCOM_KEY = "report_url"


class StuckReportLink(BaseOperatorLink):
    """'Stuck report' button on the task: the HTML report, served by the api-server (/fleet-reports)."""

    name = "Stuck report"
    xcom_key = REPORT_XCOM_KEY

    def get_link(self, operator, *, ti_key) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=REPORT_XCOM_KEY) or ""


def report_url(html_path, data_root: str) -> str:
    """The report's URL under the api-server's /fleet-reports app (relative to <data root>/reports;
    a local path or a file of the data root's object store)."""
    from airflow.configuration import conf

    from fleetkit.core.settings import under_root

    if isinstance(html_path, Path):
        try:
            rel = html_path.resolve().relative_to((Path(data_root) / "reports").resolve()).as_posix()
        except ValueError:
            return html_path.resolve().as_uri()
    else:
        reports = under_root(data_root, "reports").rstrip("/") + "/"
        if not str(html_path).startswith(reports):
            return str(html_path)
        rel = str(html_path)[len(reports):]
    base = conf.get("api", "base_url", fallback="").rstrip("/")
    return f"{base}/fleet-reports/{rel}"


class StuckReportOperator(BaseOperator):
    """Render report.html / report.md next to the job's output, log the summary and every
    flagged partition, push the report link, copy it and the job's outputs to reports/stuck/latest, and
    alert."""

    template_fields: Sequence[str] = ("out_dir", "fleet_file", "data_root", "window")
    operator_extra_links = (StuckReportLink(),)

    def __init__(self, *, out_dir: str, fleet_file: str, data_root: str, window: str = "", **kwargs):
        super().__init__(**kwargs)
        self.out_dir, self.fleet_file, self.data_root, self.window = out_dir, fleet_file, data_root, window

    def _publish_latest(self, run_dir, report: StuckReport) -> None:
        """Copy the run's report and outputs to reports/stuck/latest (the fleet page reads them
        there), except that a group this run could not judge keeps its latest stuck verdict
        (fleetkit.stuck.report.carry_judged): then latest's report is rendered from what it shows."""
        from fleetkit.core.datasets import as_path, publish_copy, publish_rows, read_jsonl
        from fleetkit.core.settings import under_root
        from fleetkit.stuck.report import OUTPUTS, carry_judged

        latest = as_path(under_root(self.data_root, "reports", "stuck", "latest"))
        if (run_dir.resolve() == latest.resolve()) if isinstance(latest, Path) else str(run_dir) == str(latest):
            return
        latest.mkdir(parents=True, exist_ok=True)
        rows, carried = carry_judged({n: read_jsonl(latest / n) for n in OUTPUTS},
                                     {n: read_jsonl(run_dir / n) for n in OUTPUTS})
        if not carried:
            for name in OUTPUTS + ("report.html", "report.md"):
                if (run_dir / name).exists():
                    publish_copy(run_dir / name, latest / name)
            return
        self.log.warning("%d group(s) this run could not judge yet (too little history) keep their latest verdict "
                         "on the fleet page, marked with its time: %s", len(carried),
                         ", ".join(f"{v(c)}/{g!r}" for c, _, g in carried[:20]))
        for name in OUTPUTS:
            publish_rows(rows[name], latest / name)
        shown = StuckReport.load(latest, self.window)
        shown.blind = report.blind
        shown.render(latest)

    def _blind_alerts(self, fleet) -> list[str]:
        """One alert line per cluster that went blind (or failing, or stale), once per episode."""
        from fleetkit.collection.blind import current_state, episode_alerts
        from fleetkit.collection.groups import blind_alerted_path, collection_status
        from fleetkit.core.datasets import DataRoot

        root = DataRoot(self.data_root)
        alerted = root.read_json(blind_alerted_path(root), default=[]) or []
        lines, still = episode_alerts({c.name: current_state(collection_status(root, c.name)) for c in fleet.clusters},
                                      alerted)
        if still != alerted:
            root.write_json_atomic(blind_alerted_path(root), still)
        return lines

    def execute(self, context) -> dict:
        from fleetkit.collection.groups import collection_status
        from fleetkit.core.datasets import DataRoot

        report = StuckReport.load(self.out_dir, self.window)
        fleet = load_fleet(self.fleet_file)
        report.see_collections({c.name: collection_status(DataRoot(self.data_root), c.name) for c in fleet.clusters})
        if not report.findings:
            self.log.warning("no findings in %s (did the analysis run?)", self.out_dir)
        html_path, md_path = report.render(self.out_dir)
        url = report_url(html_path, self.data_root)
        self._publish_latest(html_path.parent, report)
        context["ti"].xcom_push(key=REPORT_XCOM_KEY, value=url)
        self.log.info("stuck-partitions report: %s (Markdown %s, link %s)", html_path, md_path, url)
        for c in report.clusters():
            self.log.info("cluster %s: %d partition(s): %s; rebalance storms: %s", v(c["cluster"]), c["partitions"],
                          ", ".join(f"{k} {n}" for k, n in c["counts"].items()),
                          ", ".join(repr(g) for g in c["storms"]) or "none")
        for b in report.blind:  # one line per blind cluster (its groups are not judged OK)
            self.log.error("cluster %s %s", v(b["cluster"]), b["line"])
        flagged = report.flagged()
        for f in flagged:
            self.log.warning("%s %s group %r %s-%s lag %s%s: %s", f["status"], v(f["cluster"]), f["group"],
                             v(f["topic"]), f["partition"], f["lag"],
                             f" (offset expires in {f['expires_in']})" if f.get("expires_in") else "", v(f["reason"]))
        alerts = report.alerts() + self._blind_alerts(fleet)
        if alerts:
            settings = fleet.alerts
            FleetAlertNotifier(title=f"{len(alerts)} stuck partition(s) / rebalance storm(s) / blind cluster(s)",
                               lines=alerts,
                               settings=settings)(context)
        return {"html": str(html_path), "markdown": str(md_path), "url": url, "flagged": len(flagged),
                "alerts": len(alerts)}
