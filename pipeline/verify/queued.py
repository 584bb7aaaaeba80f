"""Checks on the verify queue: a render worker records a job done with its verdict ``pending``
(and the voice the text was read for), then sends its id; a CPU verify worker reads the stored
audio, checks it and records the verdict.

Each job is checked once: the verdict is recorded by a conditional UPDATE (``pending`` -> the
verdict), so a redelivered message, or a second copy the reconciler sent, finds it checked and
does nothing. A verify worker killed mid-check leaves its message unacked: Redis hands it to
another one after the visibility timeout. A message that never went out (the render worker died
between recording the job and sending) is found by the reconciler: a done job still ``pending``
that no verify message names is sent again (``stranded``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import redis
from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session, sessionmaker

from pipeline import loudness
from pipeline.audio import decode
from pipeline.db.models import Job, JobMetrics, JobStatus
from pipeline.db.session import rows_matched
from pipeline.errors import InputError
from pipeline.lexicon.store import Versions, job_lexicon
from pipeline.manifest import close_if_finished
from pipeline.messages import VERIFY_TASK, job_ids_in_messages
from pipeline.routing import VERIFY_QUEUE
from pipeline.storage import ObjectStore
from pipeline.textfront import VoiceProfile
from pipeline.verify import verdict
from pipeline.verify.jobs import record, store_captions
from pipeline.verify.recognizer import Recognizer
from pipeline.verify.retakes import Retakes, settle

log = logging.getLogger(__name__)


def pending_record(profile: VoiceProfile) -> dict:
    """job_metrics.extra["verify"] of a job whose check is queued: the voice's profile, which the
    text front end reads the text for, since a verify worker has no engine to ask."""
    return {
        "voice": {
            "name": profile.name,
            "languages": list(profile.languages),
            "inline_tags": sorted(profile.inline_tags),
            "rate_control": profile.rate_control,
        }
    }


def _profile(pending: dict, voice: str) -> VoiceProfile:
    v = pending.get("voice") or {}
    return VoiceProfile(
        v.get("name") or voice,
        tuple(v.get("languages") or ()),
        frozenset(v.get("inline_tags") or ()),
        bool(v.get("rate_control")),
    )


@dataclass
class Checker:
    """What a verify worker needs: no engine, a recognizer."""

    sessions: sessionmaker[Session]
    store: ObjectStore
    recognizer: Recognizer | None  # None: not installed here; its jobs end not_checked
    retakes: Retakes | None = None  # a bad job rendered again (SYNTH_RERENDER_BUDGET)
    lexicons: Versions = field(default_factory=Versions)  # jobs' lexicon versions, compiled once each


@dataclass
class Checked:
    checked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # checked already, or no longer there


def verify_jobs(c: Checker, job_ids: Sequence[str]) -> Checked:
    """Check each job whose verdict is pending, store its word times and record the verdict. The
    store or the database unreachable raises (the caller retries the message); audio that cannot
    be read ends the job not_checked, with the reason."""
    out = Checked()
    for job_id in job_ids:
        with c.sessions() as session:
            row = session.execute(
                select(Job, JobMetrics).join(JobMetrics, JobMetrics.job_id == Job.id).where(Job.id == job_id)
            ).first()
        if row is None or row[0].status != JobStatus.DONE or row[1].verdict != verdict.PENDING:
            out.skipped.append(job_id)
            continue
        job, metrics = row
        take = (metrics.extra or {}).get("retake")
        status = _retake(c, job, metrics, take) if take else _first(c, job, metrics)
        if status is None:  # another copy of the message recorded it meanwhile
            out.skipped.append(job_id)
            continue
        out.checked.append(job_id)
        if c.retakes is not None:
            c.retakes.after(job, status, take["render"] if take else metrics.renders or 1)
        _rewrite_manifest(c, job.batch_id)
    return out


def _first(c: Checker, job: Job, metrics: JobMetrics) -> str | None:
    """The check of the job's render; its verdict, or None where it was recorded already. A job
    its render worker did not meter (a GPU worker meters only levelled jobs) gets its loudness and
    true peak here, read from the audio as delivered."""
    pending = (metrics.extra or {}).get("verify") or {}
    assert job.object_key is not None  # a pending check is of a done job's render
    audio = _read(c, job.object_key)
    result = _check(c, audio, job, pending)
    store_captions(c.store, job.object_key, result)
    level = {}
    if metrics.loudness_lufs is None and not isinstance(audio, verdict.Verdict):
        measured = loudness.measure(*audio)
        level = {"loudness_lufs": measured.lufs, "true_peak_dbtp": measured.true_peak_dbtp}
    with c.sessions() as session:
        moved = rows_matched(
            session.execute(
                update(JobMetrics)
                .where(JobMetrics.job_id == job.id, JobMetrics.verdict == verdict.PENDING)
                .values(verdict=result.status, extra={**(metrics.extra or {}), "verify": record(result)}, **level)
                .execution_options(synchronize_session=False)
            )
        )
        session.commit()
    return result.status if moved else None


def _retake(c: Checker, job: Job, metrics: JobMetrics, take: dict) -> str | None:
    """The check of a retake (pipeline/retake.py), and the better render kept."""
    result = _check(c, _read(c, take["key"]), job, take)
    return settle(c.sessions, c.store, job, metrics.extra or {}, take.get("prior"), take, result)


def _read(c: Checker, key: str) -> tuple[np.ndarray, int] | verdict.Verdict:
    """The audio at ``key`` and its rate; a not_checked verdict where it cannot be read."""
    try:
        return decode(c.store.get(key))
    except InputError as e:
        return verdict.Verdict(verdict.NOT_CHECKED, [f"the stored audio cannot be read: {e}"])


def _check(c: Checker, audio: tuple[np.ndarray, int] | verdict.Verdict, job: Job, pending: dict) -> verdict.Verdict:
    """The check of ``audio`` (``_read``) against the job's text, read for the voice ``pending``
    recorded."""
    if isinstance(audio, verdict.Verdict):
        return audio
    samples, rate = audio
    return verdict.check(
        samples,
        rate,
        job.text,
        _profile(pending, job.voice),
        c.recognizer,
        job_lexicon(c.sessions, c.lexicons, job.lexicon_id, job.lexicon_version),
    )


def _rewrite_manifest(c: Checker, batch_id: str) -> None:
    """A batch's manifest, written when its last job finished, is written again once its last
    pending check is in, so it carries every verdict. Each check commits before it looks, so of
    two checks ending together at least one sees none pending."""
    still = exists().where(JobMetrics.job_id == Job.id, Job.batch_id == batch_id, JobMetrics.verdict == verdict.PENDING)
    with c.sessions() as session:
        if session.scalar(select(still)):
            return
        if close_if_finished(session, c.store, batch_id, rewrite=True):
            session.commit()


def stranded(
    sessions: sessionmaker[Session], client: redis.Redis, *, send: Callable[[str], None], before: datetime
) -> int:
    """Send again the check of every done job still pending since ``before`` that no verify
    message names (its message was lost). A copy too many is harmless: the first check records
    the verdict, the other finds it recorded."""
    held = job_ids_in_messages(client, [VERIFY_QUEUE], VERIFY_TASK)
    with sessions() as session:
        waiting = list(
            session.scalars(
                select(Job.id)
                .join(JobMetrics, JobMetrics.job_id == Job.id)
                .where(Job.status == JobStatus.DONE, JobMetrics.verdict == verdict.PENDING, Job.finished_at < before)
            )
        )
    if not waiting:
        return 0
    held |= job_ids_in_messages(client, [VERIFY_QUEUE], VERIFY_TASK)
    lost = [job_id for job_id in waiting if job_id not in held]
    for job_id in lost:
        send(job_id)
    if lost:
        log.warning("sent again the check of %d jobs whose verify message was lost", len(lost))
    return len(lost)
