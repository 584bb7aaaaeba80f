"""GET /v1/usage: what the caller's key used today and this month, and its quotas."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CurrentKey, KeyFirstRoute, Session, State
from api.schemas import Quotas, UsageCounts, UsageOut
from pipeline import usage

router = APIRouter(prefix="/v1", tags=["usage"], route_class=KeyFirstRoute)


@router.get("/usage", response_model=UsageOut)
def get_usage(key: CurrentKey, session: Session, state: State) -> UsageOut:
    (summary,) = usage.summaries(session, [key])
    return UsageOut(
        key_id=key.id,
        name=key.name,
        day=summary.day.isoformat(),
        today=UsageCounts(**summary.today.as_dict()),
        month=UsageCounts(**summary.month.as_dict()),
        unfinished_chars=summary.open_chars,
        quotas=Quotas(
            chars_per_day=key.chars_per_day,
            audio_s_per_day=key.audio_s_per_day,
            live_streams=state.live.owner_limit(key.live_streams),
        ),
        resets_in_s=usage.seconds_to_next_day(),
    )
