"""Webhooks: the key's signing secret (read, rotate) and its delivery log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from api import pagination
from api.deps import CurrentKey, KeyFirstRoute, Session, Settings
from pipeline.db.models import as_utc
from pipeline.db.models_webhooks import WebhookAttempt, WebhookDelivery, WebhookSecret
from pipeline.webhooks import deliveries, secrets

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"], route_class=KeyFirstRoute)

EventType = Literal["job.finished", "job.failed", "batch.finished"]
DeliveryState = Literal["pending", "delivering", "retrying", "succeeded", "failed"]


class SecretOut(BaseModel):
    secret: str = Field(description="whsec_<base64>: verify webhook-signature with it (Standard Webhooks)")
    previous_secret_valid_until: datetime | None = Field(
        None, description="until then webhooks also carry a signature made with the previous secret"
    )
    rotated_at: datetime | None = None


class AttemptOut(BaseModel):
    attempt_no: int
    started_at: datetime
    duration_ms: float | None
    status_code: int | None
    error: str | None
    next_attempt_at: datetime | None


class DeliveryOut(BaseModel):
    id: str = Field(description="the webhook-id header: the same on every attempt of one event")
    event_type: str
    resource_id: str
    batch_id: str
    url: str
    status: str
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None
    attempt_log: list[AttemptOut]


class DeliveryPage(BaseModel):
    data: list[DeliveryOut]
    next_cursor: str | None


def _secret_out(row: WebhookSecret) -> SecretOut:
    live = len(secrets.signing_secrets(row)) > 1
    return SecretOut(
        secret=row.secret,
        rotated_at=row.rotated_at and as_utc(row.rotated_at),
        previous_secret_valid_until=as_utc(row.previous_until) if live and row.previous_until is not None else None,
    )


@router.get("/secret", response_model=SecretOut)
def get_secret(key: CurrentKey, session: Session) -> SecretOut:
    """Your webhooks' signing secret (created on first use)."""
    row = secrets.get_or_create(session, key.id)
    session.commit()
    return _secret_out(row)


@router.post("/secret/rotate", response_model=SecretOut)
def rotate_secret(key: CurrentKey, session: Session, settings: Settings) -> SecretOut:
    """A new signing secret. The previous one keeps signing too (a second signature) for the grace
    period, so receivers can switch without losing a webhook."""
    row = secrets.rotate(session, key.id, grace_s=settings.webhook_secret_grace)
    session.commit()
    return _secret_out(row)


@router.get("/deliveries", response_model=DeliveryPage)
def list_deliveries(
    key: CurrentKey,
    session: Session,
    status: DeliveryState | None = None,
    event_type: EventType | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> DeliveryPage:
    """Your webhooks, newest first, each with every attempt to deliver it."""
    rows = deliveries.list_for_key(
        session,
        key.id,
        limit=limit + 1,
        status=status,
        event_type=event_type,
        after=pagination.decode_batch_cursor(cursor),
    )
    page = rows[:limit]
    log = deliveries.attempts_of(session, [d.id for d in page])
    nxt = pagination.encode(as_utc(page[-1].created_at), page[-1].id) if len(rows) > limit else None
    return DeliveryPage(data=[_delivery_out(d, log[d.id]) for d in page], next_cursor=nxt)


def _delivery_out(d: WebhookDelivery, attempts: list[WebhookAttempt]) -> DeliveryOut:
    def ts(value):
        return value and as_utc(value)

    return DeliveryOut(
        id=d.id,
        event_type=d.event_type,
        resource_id=d.resource_id,
        batch_id=d.batch_id,
        url=d.url,
        status=d.status,
        attempts=d.attempts,
        next_attempt_at=ts(d.next_attempt_at),
        last_status_code=d.last_status_code,
        last_error=d.last_error,
        created_at=as_utc(d.created_at),
        finished_at=ts(d.finished_at),
        attempt_log=[
            AttemptOut(
                attempt_no=a.attempt_no,
                started_at=as_utc(a.started_at),
                duration_ms=a.duration_ms,
                status_code=a.status_code,
                error=a.error,
                next_attempt_at=ts(a.next_attempt_at),
            )
            for a in attempts
        ],
    )
