"""A trigger that reads the answer a person gave an approval task's earlier try.

Airflow 3.3's scheduler can fail an approval task that an answer resumed within a second or two of
parking: the executor event of the run that parked it arrives after the resumed run was queued under
the same key, and the task is taken for killed ("finished with state success, but the task
instance's state attribute is queued"). The approval task then retries (fleet_airflow.gate). Its
HITL record still holds the answer the person gave, but a task process cannot read it (the worker's
supervisor relays only the HITL request, not the read): the triggerer can. The retry defers here;
after `settle_seconds` (past the executor event of the run that deferred, so the resume does not
race it in turn) the trigger reads the record and fires with the answer, or with none.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator
from uuid import UUID

from airflow.triggers.base import BaseTrigger, TriggerEvent

log = logging.getLogger(__name__)

#: how long the trigger waits before it reads (and so before the task resumes)
DEFAULT_SETTLE_SECONDS = 10.0


class EarlierAnswerTrigger(BaseTrigger):
    def __init__(self, ti_id: str, settle_seconds: float = DEFAULT_SETTLE_SECONDS):
        super().__init__()
        self.ti_id = str(ti_id)
        self.settle_seconds = max(0.0, float(settle_seconds))

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"ti_id": self.ti_id, "settle_seconds": self.settle_seconds})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from asgiref.sync import sync_to_async
        from airflow.sdk.execution_time.hitl import get_hitl_detail_content_detail

        await asyncio.sleep(self.settle_seconds)
        try:
            detail = await sync_to_async(get_hitl_detail_content_detail)(ti_id=UUID(self.ti_id))
        except Exception as e:  # no HITL record for this task instance: nothing was answered
            yield TriggerEvent({"answered": False, "why": f"{type(e).__name__}: {e}"[:300]})
            return
        yield TriggerEvent(answer_event(detail))


def user_dict(user) -> dict:
    """A HITL responder as a dict (Airflow passes a dict or a HITLUser model; {} for nobody)."""
    if isinstance(user, dict):
        return user
    if user is None:
        return {}
    return {"id": getattr(user, "id", None), "name": getattr(user, "name", None)}


def answer_event(detail) -> dict:
    """The trigger's event for a HITL detail response (Airflow's HITLDetailResponse)."""
    chosen = list(getattr(detail, "chosen_options", None) or [])
    if not getattr(detail, "response_received", False) or not chosen:
        return {"answered": False, "why": "Airflow's HITL record holds no answer"}
    user = user_dict(getattr(detail, "responded_by_user", None)) or None
    responded_at = getattr(detail, "responded_at", None)
    return {"answered": True, "chosen_options": chosen, "params_input": dict(getattr(detail, "params_input", None)
                                                                             or {}),
            "responded_by_user": user,
            "responded_at": responded_at.isoformat() if hasattr(responded_at, "isoformat") else responded_at}
