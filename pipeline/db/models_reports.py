"""Stored throughput reports: one row per published report (nightly or on demand)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, DateTime, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.db.base import Base, new_id, utcnow

_ts = DateTime(timezone=True)


class Report(Base):
    __tablename__ = "reports"
    __table_args__ = (Index("ix_reports_period_end", "period_end"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    period_start: Mapped[datetime] = mapped_column(_ts)
    period_end: Mapped[datetime] = mapped_column(_ts)
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
    html_key: Mapped[str | None] = mapped_column(String(500))
    json_key: Mapped[str | None] = mapped_column(String(500))
    summary: Mapped[dict | None] = mapped_column(JSON)  # the key numbers (pipeline/reports/model.py)
