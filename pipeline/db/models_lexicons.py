"""Tables of pronunciation lexicons (migration 0007): a lexicon per (owner, name), and every
version of its entries, kept whole, so a job renders with exactly the version it was given however
the lexicon changes later. Data access lives in pipeline/lexicon/store.py."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.db.base import Base, new_id, utcnow

_ts = DateTime(timezone=True)
LOCAL_OWNER = "local"  # the owner in embedded mode, where there are no API keys


class Lexicon(Base):
    __tablename__ = "lexicons"
    __table_args__ = (UniqueConstraint("owner", "name", name="uq_lexicons_owner_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    # An API key's id, or LOCAL_OWNER: not a foreign key, since the local owner has no key row.
    owner: Mapped[str] = mapped_column(String(32), index=True)
    name: Mapped[str] = mapped_column(String(100))
    version: Mapped[int] = mapped_column(Integer)  # the latest
    entry_count: Mapped[int] = mapped_column(Integer)  # of the latest version
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)


class LexiconVersion(Base):
    __tablename__ = "lexicon_versions"

    lexicon_id: Mapped[str] = mapped_column(ForeignKey("lexicons.id", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    entries: Mapped[list] = mapped_column(JSON)  # [Entry.to_dict(), ...]
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
