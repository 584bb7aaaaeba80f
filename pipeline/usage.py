"""Usage and quotas per API key.

Usage is counted where a job becomes done: ``record_done`` adds the job's characters and audio
seconds to its key's row of the day in the same transaction as the conditional UPDATE that moves
the job to DONE (pipeline/db/jobs.py ``finish``). DONE is terminal and that UPDATE moves a job at
most once, so a retried or redelivered job is counted once, and a worker that dies before its
commit counts nothing: the job is rendered again and counted then. Counters in Redis would be
cheaper but would drift from the jobs table on every crash between the two writes.

Days are UTC days; a month is the sum of its days. Only keyed work is counted: the CLI's batches
have no owner.

Quotas are checked when work is submitted: characters per day count what the key's done jobs used
today, what it has open (pending, queued or running) and what it submits now, so a tenant cannot
queue a week's work in one go; audio seconds per day cannot be known before rendering, so a key
that has rendered its day's audio gets no more work until the day turns. Two submissions checked
at the same moment may together pass the limit by one submission: a quota is a fair-use bound,
not an invoice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.db.models import TERMINAL, Batch, Job
from pipeline.db.models_api import ApiKey, KeyUsage
from pipeline.db.session import rows_matched
from pipeline.errors import InputError, QuotaExceededError

QUOTAS = ("chars_per_day", "audio_s_per_day", "live_streams")
# each column's largest value (BIGINT, and INTEGER for streams), far past any real limit
MAX_QUOTA = {"chars_per_day": 2**63 - 1, "audio_s_per_day": 2**63 - 1, "live_streams": 2**31 - 1}


@dataclass(frozen=True)
class Counts:
    jobs: int = 0
    chars: int = 0
    audio_s: float = 0.0

    def as_dict(self) -> dict:
        return {"jobs": self.jobs, "chars": self.chars, "audio_s": round(self.audio_s, 3)}


@dataclass(frozen=True)
class KeyUsageSummary:
    key: ApiKey
    day: date
    today: Counts
    month: Counts
    open_chars: int


def utc_day(now: datetime | None = None) -> date:
    return (now or datetime.now(UTC)).astimezone(UTC).date()


def seconds_to_next_day(now: datetime | None = None) -> int:
    now = (now or datetime.now(UTC)).astimezone(UTC)
    midnight = datetime.combine(now.date() + timedelta(days=1), time(), tzinfo=UTC)
    return max(1, int((midnight - now).total_seconds() + 0.999))


def record_done(
    session: Session, *, batch_id: str, chars: int, audio_s: float | None, now: datetime | None = None
) -> None:
    """Add one done job to its key's row of the day (nothing for a batch without an owner). The
    caller's transaction is the one that marked the job done."""
    key_id = session.scalar(select(Batch.owner_key_id).where(Batch.id == batch_id))
    if key_id is None:
        return
    values = dict(key_id=key_id, day=utc_day(now), jobs=1, chars=chars, audio_s=audio_s or 0.0)
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(KeyUsage).values(**values)
    stmt = stmt.on_conflict_do_update(
        index_elements=[KeyUsage.key_id, KeyUsage.day],
        set_={
            "jobs": KeyUsage.jobs + 1,
            "chars": KeyUsage.chars + stmt.excluded.chars,
            "audio_s": KeyUsage.audio_s + stmt.excluded.audio_s,
        },
    )
    session.execute(stmt)


def counts(session: Session, key_ids: list[str], since: date, until: date) -> dict[str, Counts]:
    """Each key's usage over the days [since, until]."""
    rows = session.execute(
        select(KeyUsage.key_id, func.sum(KeyUsage.jobs), func.sum(KeyUsage.chars), func.sum(KeyUsage.audio_s))
        .where(KeyUsage.key_id.in_(key_ids), KeyUsage.day >= since, KeyUsage.day <= until)
        .group_by(KeyUsage.key_id)
    )
    return {k: Counts(int(j or 0), int(c or 0), float(a or 0.0)) for k, j, c, a in rows}


def open_chars(session: Session, key_id: str) -> int:
    """Characters of the key's jobs not yet finished (pending, queued or running)."""
    return int(
        session.scalar(
            select(func.coalesce(func.sum(func.length(Job.text)), 0))
            .join(Batch, Batch.id == Job.batch_id)
            .where(Batch.owner_key_id == key_id, Job.status.not_in(list(TERMINAL)))
        )
        or 0
    )


def summaries(session: Session, keys: list[ApiKey], now: datetime | None = None) -> list[KeyUsageSummary]:
    """Today's and this month's usage of each key, in the order given."""
    day = utc_day(now)
    ids = [k.id for k in keys]
    today = counts(session, ids, day, day)
    month = counts(session, ids, day.replace(day=1), day)
    return [
        KeyUsageSummary(
            key=k,
            day=day,
            today=today.get(k.id, Counts()),
            month=month.get(k.id, Counts()),
            open_chars=open_chars(session, k.id),
        )
        for k in keys
    ]


def has_daily_quota(key: ApiKey) -> bool:
    return key.chars_per_day is not None or key.audio_s_per_day is not None


def check_submission(session: Session, key: ApiKey, chars: int, now: datetime | None = None) -> None:
    """QuotaExceededError (with the seconds until the day turns) if ``chars`` more characters
    would pass the key's quota of the day; nothing is read for a key without quotas."""
    if not has_daily_quota(key):
        return
    day = utc_day(now)
    used = counts(session, [key.id], day, day).get(key.id, Counts())
    retry = seconds_to_next_day(now)
    if key.audio_s_per_day is not None and used.audio_s >= key.audio_s_per_day:
        raise QuotaExceededError(
            f"this API key has used its quota of {key.audio_s_per_day:g} audio seconds per day "
            f"({used.audio_s:.1f} s today); it resets at 00:00 UTC",
            retry_after=retry,
        )
    if key.chars_per_day is not None:
        pending = open_chars(session, key.id)
        total = used.chars + pending + chars
        if total > key.chars_per_day:
            raise QuotaExceededError(
                f"this request's {chars:,} characters would pass this API key's quota of "
                f"{key.chars_per_day:,} characters per day ({used.chars:,} used today, {pending:,} in "
                f"unfinished jobs); it resets at 00:00 UTC",
                retry_after=retry,
            )


def set_quotas(session: Session, key_id: str, changes: dict[str, float | None]) -> None:
    """Set (a number) or clear (None) the named quotas of an active key; the caller commits."""
    unknown = set(changes) - set(QUOTAS)
    if unknown:
        raise InputError(f"unknown quota {', '.join(sorted(unknown))}; quotas are {', '.join(QUOTAS)}")
    for name, value in changes.items():
        # NaN fails every comparison (a bare `< 0` let it pass), inf is "none" by another name, and a
        # number past the column overflows it: a traceback, not an answer
        if value is not None and not (0 <= value <= MAX_QUOTA[name]):
            raise InputError(f"{name} {value}: give a number from 0 to {MAX_QUOTA[name]:,}, or none for no limit")
    moved = rows_matched(
        session.execute(update(ApiKey).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None)).values(**changes))
    )
    if moved != 1:
        raise InputError(f"no active key with id {key_id!r} (see `synth keys list`)")
