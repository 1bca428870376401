"""Answering approval tasks in the tests and the benchmarks that drive a runbook.

Under dag.test() an approval task waits forever (its timeout is not applied), so tests answer it
the way Airflow's REST route PATCH .../hitlDetails does: write the response on the hitl_detail row
and resume the parked task instance (handle_event_submit), in one transaction.

Who asks and who answers: dag.test() records every run as triggered by "dag_test", so `run_dag`
names the requester in the conf (`requested_by`, "admin" by default) and the answerer answers as
"approver" by default, another listed approver of the harness's fleet files (fleetlab.harness). The
gate refuses an approver who requested the run.
"""

from __future__ import annotations

import datetime as dt
import threading
import time


def run_dag(dag, conf: dict, answerer: "Answerer | None" = None, requested_by: str | None = "admin"):
    """dag.test() with the approval answered by `answerer` (started first, checked after), the run
    requested by `requested_by` (the conf key, unless the conf names one; None: nobody)."""
    if requested_by is not None:
        conf = {"requested_by": requested_by, **conf}
    if answerer is not None:
        answerer.start()
    dr = dag.test(run_conf=conf)
    if answerer is not None:
        answerer.join(5)
        assert answerer.error is None, answerer.error
    return dr


def task_states(dr) -> dict:
    return {ti.task_id: ti.state for ti in dr.get_task_instances()}


class _Watcher(threading.Thread):
    """A thread that watches `dag_id`'s approvals for `timeout` seconds (from its creation on);
    what it raises is kept in `error` for the test to report."""

    def __init__(self, kind: str, dag_id: str, timeout: float):
        super().__init__(daemon=True, name=f"{kind}-{dag_id}")
        self.dag_id, self.timeout = dag_id, timeout
        self.error: BaseException | None = None
        self.created = time.time()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def _run(self) -> None:
        raise NotImplementedError


class Answerer(_Watcher):
    """Waits for the first unanswered approval of `dag_id` and answers it.

    `before_commit(body)` runs after the response is written and before it is committed: the
    approver has answered, the task cannot resume yet (a test edits the stored plan there).
    """

    def __init__(self, dag_id: str, answer: str = "Approve", user: str = "approver", before_commit=None,
                 timeout: float = 180):
        super().__init__("answer", dag_id, timeout)
        self.answer, self.user = answer, user
        self.before_commit = before_commit
        self.body: str | None = None
        self.subject: str | None = None
        self.assignees = None
        self.answered = threading.Event()
        self.settle = 1.5  # seconds a parked approval is seen waiting before it is answered
        self._seen: dict = {}

    def _run(self) -> None:
        from sqlalchemy import select

        from airflow._shared.timezones import timezone
        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance as TI
        from airflow.models.trigger import handle_event_submit
        from airflow.triggers.base import TriggerEvent
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState

        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with create_session() as session:
                row = session.scalars(
                    select(HITLDetail).join(TI, TI.id == HITLDetail.ti_id)
                    .where(TI.dag_id == self.dag_id, HITLDetail.responded_at.is_(None),
                           # only this test's run: a run left waiting by an interrupted session is not ours
                           TI.start_date >= dt.datetime.fromtimestamp(self.created - 5, dt.timezone.utc),
                           TI.state.in_([TaskInstanceState.AWAITING_INPUT, TaskInstanceState.DEFERRED]))
                ).first()
                if row is not None:
                    # answer only once the task has been parked for a moment: an answer written while
                    # the task is still deferring is overwritten by the deferral (the approval then
                    # waits forever under dag.test); a person never answers that fast
                    first = self._seen.setdefault(row.ti_id, time.monotonic())
                    if time.monotonic() - first < self.settle:
                        session.rollback()
                        time.sleep(0.2)
                        continue
                    ti = session.get(TI, row.ti_id)
                    self.body, self.subject, self.assignees = row.body, row.subject, row.assignees
                    row.responded_by = {"id": self.user, "name": self.user}
                    row.responded_at = timezone.utcnow()
                    row.chosen_options = [self.answer]
                    row.params_input = {}
                    session.add(row)
                    handle_event_submit(TriggerEvent(row.as_resume_event_payload()), task_instance=ti,
                                        session=session)
                    if self.before_commit:
                        self.before_commit(self.body)
                    session.commit()
                    self.answered.set()
                    return
            time.sleep(0.5)
        raise TimeoutError(f"no approval of {self.dag_id} to answer within {self.timeout}s")


class MarkSuccess(_Watcher):
    """Waits for the first unanswered approval of `dag_id` and, without answering it, does what a
    user can do through the public REST API: mark the approval task success (PATCH .../taskInstances/
    approve) and write its return XCom (POST .../xcomEntries) claiming an approval."""

    def __init__(self, dag_id: str, claimed: dict, timeout: float = 180):
        super().__init__("mark", dag_id, timeout)
        self.claimed = claimed
        self.done = threading.Event()

    def _run(self) -> None:
        from sqlalchemy import select

        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance as TI
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState

        deadline = time.monotonic() + self.timeout
        first = None
        while time.monotonic() < deadline:
            with create_session() as session:
                ti = session.scalars(
                    select(TI).join(HITLDetail, TI.id == HITLDetail.ti_id)
                    .where(TI.dag_id == self.dag_id, HITLDetail.responded_at.is_(None),
                           TI.start_date >= dt.datetime.fromtimestamp(self.created - 5, dt.timezone.utc),
                           TI.state == TaskInstanceState.AWAITING_INPUT)).first()
                if ti is not None:
                    first = first or time.monotonic()
                    if time.monotonic() - first >= 1.5:  # parked for a moment, as a person would see it
                        XComModel.set(key="return_value", value=self.claimed, dag_id=ti.dag_id, task_id=ti.task_id,
                                      run_id=ti.run_id, map_index=ti.map_index, serialize=False,  # as REST does
                                      session=session)
                        ti.set_state(TaskInstanceState.SUCCESS, session=session)
                        session.commit()
                        self.done.set()
                        return
            time.sleep(0.3)
        raise TimeoutError(f"no approval of {self.dag_id} to mark within {self.timeout}s")
