"""Tables of the webhooks: signing secrets per API key, one delivery per event, and
every attempt to deliver it. Data access lives in pipeline/webhooks/."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.db.base import Base, utcnow

_ts = DateTime(timezone=True)


class DeliveryStatus(str, enum.Enum):
    PENDING = "pending"  # emitted, first attempt not yet made
    DELIVERING = "delivering"  # an attempt is in flight
    RETRYING = "retrying"  # an attempt failed; next_attempt_at says when the next one goes
    SUCCEEDED = "succeeded"  # a 2xx answer
    FAILED = "failed"  # the retry schedule ran out, the URL was refused, or 410 Gone


class WebhookSecret(Base):
    """The signing secret of one API key (and, for a grace period after a rotation, the previous one)."""

    __tablename__ = "webhook_secrets"

    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True)
    secret: Mapped[str] = mapped_column(String(128))
    previous_secret: Mapped[str | None] = mapped_column(String(128))
    previous_until: Mapped[datetime | None] = mapped_column(_ts)  # end of the rotation grace period
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
    rotated_at: Mapped[datetime | None] = mapped_column(_ts)


class WebhookDelivery(Base):
    """One event for one webhook URL. Its id is the webhook-id, the same on every attempt, and is
    derived from (event type, resource id), so an event is recorded once however often it is emitted."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("event_type", "resource_id", name="uq_webhook_deliveries_event"),
        Index("ix_webhook_deliveries_key_created", "key_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    event_type: Mapped[str] = mapped_column(String(32))
    resource_id: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str | None] = mapped_column(String(32))  # the owner's key (listing); not a FK: history stays
    batch_id: Mapped[str] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)  # the exact bytes sent (and signed) each time
    status: Mapped[str] = mapped_column(String(16), default=DeliveryStatus.PENDING.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(_ts)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(_ts, default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(_ts)


class WebhookAttempt(Base):
    __tablename__ = "webhook_attempts"
    __table_args__ = (UniqueConstraint("delivery_id", "attempt_no", name="uq_webhook_attempts_no"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(ForeignKey("webhook_deliveries.id", ondelete="CASCADE"))
    attempt_no: Mapped[int] = mapped_column(Integer)
    url: Mapped[str] = mapped_column(Text)
    address: Mapped[str | None] = mapped_column(String(64))  # the IP actually connected to
    started_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
    duration_ms: Mapped[float | None] = mapped_column(Float)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    next_attempt_at: Mapped[datetime | None] = mapped_column(_ts)  # None: no further attempt
