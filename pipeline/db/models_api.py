"""Tables of the REST API: keys and idempotency records (migration 0002). Batches and jobs carry
their owner (``batches.owner_key_id``) in pipeline/db/models.py."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.db.base import Base, new_id, utcnow

_ts = DateTime(timezone=True)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    prefix: Mapped[str] = mapped_column(String(32))            # shown in listings: "sk_synth_Ab12"
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex (pipeline/api_keys.py)
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(_ts)


class IdempotencyRecord(Base):
    """One per (key, Idempotency-Key): the request it answered and the resource it created."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("key_id", "idempotency_key", name="uq_idempotency_keys_key_idem"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    idempotency_key: Mapped[str] = mapped_column(String(200))
    fingerprint: Mapped[str] = mapped_column(String(64))       # sha256 of method, route and body
    resource_type: Mapped[str] = mapped_column(String(16))     # "batch" | "job"
    resource_id: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
