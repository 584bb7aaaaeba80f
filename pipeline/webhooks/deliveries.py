"""Data access for deliveries and their attempts. An attempt is claimed with one conditional
UPDATE, so two messages for the same attempt (a duplicate enqueue, a message redelivered after
Redis's visibility timeout) cannot both send it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from pipeline.db.models import utcnow
from pipeline.db.models_webhooks import DeliveryStatus, WebhookAttempt, WebhookDelivery
from pipeline.db.session import rows_matched

_OPEN = (DeliveryStatus.PENDING.value, DeliveryStatus.RETRYING.value)


@dataclass(frozen=True)
class AttemptRecord:
    attempt_no: int
    url: str
    address: str | None
    started_at: datetime
    duration_ms: float | None
    status_code: int | None
    error: str | None
    next_attempt_at: datetime | None  # None: this was the last attempt
    succeeded: bool


def claim(session: Session, delivery_id: str, attempt_no: int) -> WebhookDelivery | None:
    """Take attempt ``attempt_no`` (1-based) of an open delivery; None if another message took it,
    it already succeeded or failed, or the delivery is gone. Commits the claim."""
    moved = rows_matched(
        session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == delivery_id,
                WebhookDelivery.attempts == attempt_no - 1,
                WebhookDelivery.status.in_(_OPEN),
            )
            .values(attempts=attempt_no, status=DeliveryStatus.DELIVERING.value, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )
    )
    session.commit()
    return session.get(WebhookDelivery, delivery_id, populate_existing=True) if moved else None


def url_of(session: Session, delivery_id: str) -> str | None:
    return session.scalar(select(WebhookDelivery.url).where(WebhookDelivery.id == delivery_id))


def record(session: Session, delivery: WebhookDelivery, attempt: AttemptRecord) -> None:
    """Log the attempt and move the delivery on: succeeded, retrying (with next_attempt_at) or failed."""
    fields = {k: v for k, v in attempt.__dict__.items() if k != "succeeded"}
    session.add(WebhookAttempt(delivery_id=delivery.id, **fields))
    if attempt.succeeded:
        status = DeliveryStatus.SUCCEEDED
    elif attempt.next_attempt_at is not None:
        status = DeliveryStatus.RETRYING
    else:
        status = DeliveryStatus.FAILED
    now = utcnow()
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery.id)
        .values(
            status=status.value,
            next_attempt_at=attempt.next_attempt_at,
            last_status_code=attempt.status_code,
            last_error=attempt.error,
            updated_at=now,
            finished_at=None if status == DeliveryStatus.RETRYING else now,
        )
        .execution_options(synchronize_session=False)
    )


def list_for_key(
    session: Session,
    key_id: str,
    *,
    limit: int = 50,
    status: str | None = None,
    event_type: str | None = None,
    after: tuple[datetime, str] | None = None,
) -> list[WebhookDelivery]:
    """A key's deliveries, newest first; ``after`` = (created_at, id) of the previous page's last row."""
    query = select(WebhookDelivery).where(WebhookDelivery.key_id == key_id)
    if status:
        query = query.where(WebhookDelivery.status == status)
    if event_type:
        query = query.where(WebhookDelivery.event_type == event_type)
    if after is not None:
        created, last_id = after
        query = query.where(
            or_(
                WebhookDelivery.created_at < created,
                and_(WebhookDelivery.created_at == created, WebhookDelivery.id < last_id),
            )
        )
    return list(
        session.scalars(query.order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc()).limit(limit))
    )


def attempts_of(session: Session, delivery_ids: list[str]) -> dict[str, list[WebhookAttempt]]:
    out: dict[str, list[WebhookAttempt]] = {i: [] for i in delivery_ids}
    if delivery_ids:
        rows = session.scalars(
            select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id.in_(delivery_ids))
            .order_by(WebhookAttempt.delivery_id, WebhookAttempt.attempt_no)
        )
        for row in rows:
            out[row.delivery_id].append(row)
    return out


def overdue(session: Session, *, older_than: datetime, limit: int = 1000) -> list[tuple[str, int]]:
    """(delivery id, next attempt no) of open deliveries whose next attempt is past ``older_than``:
    their message was lost (a worker died between recording an attempt and enqueueing the next)."""
    rows = session.execute(
        select(WebhookDelivery.id, WebhookDelivery.attempts)
        .where(WebhookDelivery.status.in_(_OPEN), WebhookDelivery.next_attempt_at < older_than)
        .order_by(WebhookDelivery.next_attempt_at)
        .limit(limit)
    )
    return [(delivery_id, attempts + 1) for delivery_id, attempts in rows]
