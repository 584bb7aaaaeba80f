"""A ``bad`` job rendered again: which of two renders is kept, and how the kept one takes the job's
place (pipeline/retake.py renders the retake).

A retake is stored under ``retakes/`` beside the batch's ``audio/`` folder, never in it, so the
audio folder holds one object per job at every moment. A better retake replaces the job's object
in one write (an S3 PUT, or a rename on the local store): a reader gets the old audio or the new,
never neither. Then the job's row records it, by a conditional UPDATE on the render count, and
the retake is removed. A worker killed between those steps leaves the retake and its message:
the message's next delivery writes the same bytes again, or finds the count recorded and only
removes the retake."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db.models import Job, JobMetrics
from pipeline.db.session import rows_matched
from pipeline.formats import get_format
from pipeline.storage import ObjectStore
from pipeline.verify import verdict
from pipeline.verify.jobs import CAPTION_TYPES, caption_key, record, store_captions

# Better first. A retake is kept only where it ranks higher, or ranks the same with fewer
# characters misheard: a tie keeps the render already delivered.
RANK = {verdict.CLEAN: 0, verdict.SUSPECT: 1, verdict.NOT_CHECKED: 2, verdict.BAD: 3}


@dataclass(frozen=True)
class Retakes:
    """A bad job is rendered again while it has had at most ``budget`` retakes
    (SYNTH_RERENDER_BUDGET); ``send(job_id, queue, render)`` asks a render worker for render
    number ``render`` of the job."""

    budget: int
    send: Callable[[str, str | None, int], None]

    def after(self, job: Job, status: str, renders: int) -> None:
        if status == verdict.BAD and renders <= self.budget:
            self.send(job.id, job.queue, renders + 1)


def coming(session: Session, batch_id: str, budget: int) -> int:
    """The batch's done jobs with a retake on its way: a bad verdict, and renders left in
    ``budget`` (``Retakes.after`` sent one for it)."""
    return (
        session.scalar(
            select(func.count())
            .select_from(JobMetrics)
            .join(Job, Job.id == JobMetrics.job_id)
            .where(
                Job.batch_id == batch_id,
                JobMetrics.verdict == verdict.BAD,
                func.coalesce(JobMetrics.renders, 1) <= budget,
            )
        )
        or 0
    )


def retake_key(object_key: str, render: int) -> str:
    """``batches/B/audio/line-000001.J.mp3`` -> ``batches/B/retakes/line-000001.J.r2.mp3``."""
    folder, _, name = object_key.rpartition("/audio/")
    stem, _, ext = name.rpartition(".")
    return f"{folder}/retakes/{stem}.r{render}.{ext}"


def better(new: verdict.Verdict, old_status: str | None, old_scores: dict) -> bool:
    old_rank = RANK.get(old_status or verdict.NOT_CHECKED, RANK[verdict.NOT_CHECKED])
    if RANK[new.status] != old_rank:
        return RANK[new.status] < old_rank
    return _cer(new.scores) < _cer(old_scores)


def _cer(scores: dict) -> float:
    """A render's CER, 1 where it has none (nothing compared, or not checked)."""
    cer = scores.get("cer")
    return 1.0 if cer is None else cer


def settle(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    job: Job,
    extra: dict,
    prior: str | None,
    take: dict,
    result: verdict.Verdict,
) -> str | None:
    """Keep the better of the job's render, whose verdict is ``prior`` (its scores in ``extra``,
    job_metrics.extra), and the retake ``take`` (pipeline/retake.py), whose check is ``result``.
    Returns the job's verdict now, or None where this retake was settled already (a redelivered
    message)."""
    render, kept_check = take["render"], extra.get("verify") or {}
    kept = better(result, prior, kept_check.get("scores") or {})
    if kept:
        assert job.object_key is not None  # a retake is of a done job's render
        store.put(job.object_key, store.get(take["key"]), get_format(job.format).content_type)
        if not store_captions(store, job.object_key, result):  # no word times: none stale left behind
            for fmt in CAPTION_TYPES:
                store.delete(caption_key(job.object_key, fmt))
    status = result.status if kept else prior
    extra = {k: v for k, v in extra.items() if k != "retake"}
    extra["verify"] = record(result) if kept else kept_check
    extra["retakes"] = [
        *(extra.get("retakes") or []),
        {"render": render, "verdict": result.status, "kept": kept, "reasons": result.reasons},
    ]
    values: dict = {"renders": render, "verdict": status, "extra": extra}
    if kept:
        values.update(
            audio_s=take["audio_s"], loudness_lufs=take["loudness_lufs"], true_peak_dbtp=take["true_peak_dbtp"]
        )
    with sessions() as session:
        moved = rows_matched(
            session.execute(
                update(JobMetrics)
                .where(JobMetrics.job_id == job.id, or_(JobMetrics.renders.is_(None), JobMetrics.renders < render))
                .values(**values)
                .execution_options(synchronize_session=False)
            )
        )
        session.commit()
    store.delete(take["key"])
    return status if moved else None
