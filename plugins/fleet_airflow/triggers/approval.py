"""The approval gate's trigger: the standard HITL trigger, handing an answer to the approval task no
sooner than SETTLE_SECONDS after the task parked.

Why: Airflow's scheduler processes the executor's event of the run that parked the task (it
deferred, its worker exited) some seconds after the task parked, more under load. An answer that
resumes the task before that event is processed makes the scheduler find a task that is queued
again while its executor says it finished, and it fails the task: a person who clicks Approve the
moment the request appears would get a failed runbook (a race of Airflow's, seen on 3.3.2). Holding
the answer until the parking run has surely been accounted for removes the race; the answer itself
is recorded at once (the UI shows it answered), only the run continues a little later.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any, AsyncIterator

from airflow.providers.standard.triggers.hitl import HITLTrigger

#: seconds between the task parking and its earliest resumption, by default (the race needs a few
#: seconds, more under load): FLEET_APPROVAL_SETTLE_SECONDS changes it
SETTLE_SECONDS = 10.0


def settle_seconds() -> float:
    """FLEET_APPROVAL_SETTLE_SECONDS (a deployment setting, read when the task parks), else SETTLE_SECONDS."""
    from fleetkit.core.errors import FleetConfigError
    from fleetkit.core.settings import _value

    raw = _value("FLEET_APPROVAL_SETTLE_SECONDS")
    if raw is None:
        return SETTLE_SECONDS
    try:
        value = float(raw)
    except ValueError:
        raise FleetConfigError(f"FLEET_APPROVAL_SETTLE_SECONDS: {raw!r} is not a number of seconds") from None
    if value < 0:
        raise FleetConfigError(f"FLEET_APPROVAL_SETTLE_SECONDS: {raw!r} must be 0 or more")
    return value
CLASSPATH = "fleet_airflow.triggers.approval.SettledApprovalTrigger"


class SettledApprovalTrigger(HITLTrigger):
    """HITLTrigger whose first look at the answer is SETTLE_SECONDS after `parked_at`."""

    def __init__(self, *, parked_at: str | None = None, settle_seconds: float | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.parked_at = parked_at or dt.datetime.now(dt.timezone.utc).isoformat()
        self.settle_seconds = float(settle_seconds if settle_seconds is not None else SETTLE_SECONDS)

    @classmethod
    def from_trigger(cls, trigger: HITLTrigger, settle: float | None = None) -> "SettledApprovalTrigger":
        """The same request as `trigger` (whatever the standard provider's version serializes), settled
        for `settle` seconds (default: the deployment's settle_seconds())."""
        _, kwargs = trigger.serialize()
        return cls(settle_seconds=settle_seconds() if settle is None else settle, **kwargs)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        _, kwargs = super().serialize()
        return CLASSPATH, {**kwargs, "parked_at": self.parked_at, "settle_seconds": self.settle_seconds}

    def seconds_to_wait(self, now: dt.datetime | None = None) -> float:
        now = now or dt.datetime.now(dt.timezone.utc)
        parked = dt.datetime.fromisoformat(self.parked_at)
        return max(0.0, (parked + dt.timedelta(seconds=self.settle_seconds) - now).total_seconds())

    async def run(self) -> AsyncIterator:
        wait = self.seconds_to_wait()
        if wait > 0:
            await asyncio.sleep(wait)
        async for event in super().run():
            yield event
