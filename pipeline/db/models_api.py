"""Tables of the REST API: keys and idempotency records (migration 0002), each key's quotas and
usage (0008). Batches and jobs carry their owner (``batches.owner_key_id``) in pipeline/db/models.py."""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import BigInteger, Date, DateTime, Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.db.base import Base, new_id, utcnow

_ts = DateTime(timezone=True)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    prefix: Mapped[str] = mapped_column(String(32))  # shown in listings: "sk_synth_Ab12"
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex (pipeline/api_keys.py)
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(_ts)
    # Quotas (migration 0008); None: no limit. Days are UTC days (pipeline/usage.py).
    chars_per_day: Mapped[int | None] = mapped_column(BigInteger)
    audio_s_per_day: Mapped[float | None] = mapped_column(Float)
    live_streams: Mapped[int | None] = mapped_column(Integer)  # under SYNTH_API_MAX_LIVE_STREAMS_PER_KEY


class KeyUsage(Base):
    """What a key's done jobs used in one UTC day: one row per (key, day), added to in the
    transaction that marks each job done (pipeline/usage.py), so a job is counted once."""

    __tablename__ = "key_usage"

    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    jobs: Mapped[int] = mapped_column(Integer, default=0)
    chars: Mapped[int] = mapped_column(BigInteger, default=0)
    audio_s: Mapped[float] = mapped_column(Float, default=0.0)


class IdempotencyRecord(Base):
    """One per (key, Idempotency-Key): the request it answered and the resource it created."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("key_id", "idempotency_key", name="uq_idempotency_keys_key_idem"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"))
    idempotency_key: Mapped[str] = mapped_column(String(200))
    fingerprint: Mapped[str] = mapped_column(String(64))  # sha256 of method, route and body
    resource_type: Mapped[str] = mapped_column(String(16))  # "batch" | "job"
    resource_id: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
