"""Tables. Schemas for HTTP live in api/, not here.

The batch, job and metrics tables are here; the reports', the API's and the webhooks' live in
models_*.py, imported below so that importing this module puts every table on ``Base.metadata``
(the migrations compare against it).
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from pipeline.db import models_api, models_lexicons, models_reports, models_webhooks  # noqa: F401 - see the module
from pipeline.db.base import Base, new_id, utcnow


def as_utc(value: datetime) -> datetime:
    """SQLite hands back naive timestamps; they are UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class JobStatus(str, enum.Enum):
    PENDING = "pending"  # written, not yet on the queue
    QUEUED = "queued"  # a message for it is on the queue
    RUNNING = "running"  # a worker holds it
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})

# from -> allowed to. RUNNING -> RUNNING is a redelivery after a lost worker; RUNNING -> QUEUED is a
# retry. FAILED -> QUEUED is an operator's re-run.
TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.PENDING: frozenset({JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.RUNNING: frozenset({JobStatus.RUNNING, JobStatus.QUEUED, JobStatus.DONE, JobStatus.FAILED}),
    JobStatus.FAILED: frozenset({JobStatus.QUEUED}),
    JobStatus.DONE: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}


def sources_of(target: JobStatus) -> frozenset[JobStatus]:
    """The states a job may be in to move to ``target``."""
    return frozenset(s for s, targets in TRANSITIONS.items() if target in targets)


_status = Enum(
    JobStatus,
    name="job_status",
    values_callable=lambda e: [m.value for m in e],
    native_enum=False,
    length=16,
    validate_strings=True,
)
_ts = DateTime(timezone=True)


class Batch(Base):
    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str | None] = mapped_column(String(200))
    source: Mapped[str | None] = mapped_column(String(500))  # file name, "-" for stdin
    voice: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(8))
    sample_rate: Mapped[int | None] = mapped_column(Integer)
    priority: Mapped[str] = mapped_column(String(16), default="batch")
    total_jobs: Mapped[int] = mapped_column(Integer, default=0)
    skipped_lines: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(_ts, index=True)  # open batches (0008)
    manifest_key: Mapped[str | None] = mapped_column(String(500))
    # API (migration 0002). CLI batches have no owner and are invisible to the API.
    owner_key_id: Mapped[str | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"), index=True)
    kind: Mapped[str] = mapped_column(String(16), default="batch", server_default="batch")  # or "job"
    webhook_url: Mapped[str | None] = mapped_column(String(2000))  # named so by migration 0005
    webhook_events: Mapped[list | None] = mapped_column(JSON)
    expires_at: Mapped[datetime | None] = mapped_column(_ts, index=True)  # None: kept until deleted
    cancelled_at: Mapped[datetime | None] = mapped_column(_ts)
    loudness_target: Mapped[float | None] = mapped_column(Float)  # LUFS; None: levels left as rendered
    true_peak_max: Mapped[float | None] = mapped_column(Float)  # dBTP ceiling of a levelled batch
    # The pronunciation lexicon the batch was made with (migration 0007); None: none
    lexicon_id: Mapped[str | None] = mapped_column(String(32))
    lexicon_version: Mapped[int | None] = mapped_column(Integer)

    jobs: Mapped[list[Job]] = relationship(back_populates="batch", cascade="all, delete-orphan", passive_deletes=True)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("batch_id", "client_id", name="uq_jobs_batch_client"),
        Index("ix_jobs_batch_status", "batch_id", "status"),
        # the console's latest failures and failures per hour (pipeline/console; migration 0008)
        Index("ix_jobs_status_finished_at", "status", "finished_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    batch_id: Mapped[str] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"))
    client_id: Mapped[str] = mapped_column(String(200))
    idempotency_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    line_no: Mapped[int | None] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    voice: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(8))
    sample_rate: Mapped[int | None] = mapped_column(Integer)
    loudness_target: Mapped[float | None] = mapped_column(Float)  # migration 0006, as the batch's
    true_peak_max: Mapped[float | None] = mapped_column(Float)
    # The lexicon version the job renders with: its batch's, or a later one (`synth lexicon apply`)
    lexicon_id: Mapped[str | None] = mapped_column(String(32))
    lexicon_version: Mapped[int | None] = mapped_column(Integer)
    # The seed it renders with (migration 0011): None, the engine's own, until a chapter is rendered
    # again with a new one (pipeline/documents/rerender.py); part of the render's identity.
    seed: Mapped[int | None] = mapped_column(Integer)
    priority: Mapped[str] = mapped_column(String(16), default="batch")
    # every job is written with its queue (submit.queue_for); the column is nullable as 0001 made it
    queue: Mapped[str] = mapped_column(String(64), nullable=True)
    status: Mapped[JobStatus] = mapped_column(_status, default=JobStatus.PENDING)
    webhook_url: Mapped[str | None] = mapped_column(String(2000))  # migration 0002, named so by 0005
    webhook_events: Mapped[list | None] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    object_key: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
    queued_at: Mapped[datetime | None] = mapped_column(_ts)
    started_at: Mapped[datetime | None] = mapped_column(_ts)
    finished_at: Mapped[datetime | None] = mapped_column(_ts)
    updated_at: Mapped[datetime] = mapped_column(_ts, default=utcnow, onupdate=utcnow)

    batch: Mapped[Batch] = relationship(back_populates="jobs")
    metrics: Mapped[JobMetrics | None] = relationship(
        back_populates="job", cascade="all, delete-orphan", passive_deletes=True
    )


class JobMetrics(Base):
    __tablename__ = "job_metrics"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    queue_wait_s: Mapped[float | None] = mapped_column(Float)
    ttfb_s: Mapped[float | None] = mapped_column(Float)  # first audio available - submission
    synth_s: Mapped[float | None] = mapped_column(Float)  # engine time for this job
    audio_s: Mapped[float | None] = mapped_column(Float)
    rtf: Mapped[float | None] = mapped_column(Float)  # synth_s / audio_s
    engine: Mapped[str | None] = mapped_column(String(32))
    model: Mapped[str | None] = mapped_column(String(200))
    quantization: Mapped[str | None] = mapped_column(String(32))
    device_type: Mapped[str | None] = mapped_column(String(200))
    worker_host: Mapped[str | None] = mapped_column(String(200))
    batch_size: Mapped[int | None] = mapped_column(Integer)  # jobs admitted together
    loudness_lufs: Mapped[float | None] = mapped_column(Float)  # BS.1770 integrated, as stored
    true_peak_dbtp: Mapped[float | None] = mapped_column(Float)
    # clean, suspect, bad or not_checked (pipeline/verify); None: not checked (SYNTH_VERIFY).
    # Its reasons and scores are in extra["verify"].
    verdict: Mapped[str | None] = mapped_column(String(16))
    # Renders the job took: 1, more where a bad verdict had it rendered again (pipeline/retake.py).
    # None: recorded before renders were counted (one).
    renders: Mapped[int | None] = mapped_column(Integer)
    extra: Mapped[dict | None] = mapped_column(JSON)
    recorded_at: Mapped[datetime] = mapped_column(_ts, default=utcnow, index=True)  # the console's day (0008)
    # The engine seconds this job did not spend: its audio is a stored render's (pipeline/reuse.py,
    # migration 0010). None: rendered.
    reused_s: Mapped[float | None] = mapped_column(Float)

    job: Mapped[Job] = relationship(back_populates="metrics")


class StoredRender(Base):
    """A rendered job's content identity within its scope, and where its audio is: a later job of
    the same identity and scope copies it instead of rendering (pipeline/reuse.py). Its rows go
    with the job, so a deleted batch's audio is never offered."""

    __tablename__ = "stored_renders"

    scope: Mapped[str] = mapped_column(String(32), primary_key=True)  # an API key's id, "" or "*"
    identity: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256, hex
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    object_key: Mapped[str] = mapped_column(String(500))
    metrics: Mapped[dict | None] = mapped_column(JSON)  # the job's measured metrics, for the reuser
    created_at: Mapped[datetime] = mapped_column(_ts, default=utcnow)
