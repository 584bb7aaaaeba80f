"""Render chapters of a rendered document again, each with a new seed, and assemble it again.

The chapters' jobs go back to the queue (a conditional UPDATE from done or failed, as a retry and
a lexicon's apply do) with the chapter's new seed, and render as any job does: buckets, retries,
the reconciler. The seed is part of a render's identity (pipeline/reuse.py), so no stored render
answers for them. Each job keeps its audio object until its new render replaces it whole (the
store's put is atomic); its metrics row goes, since a queued job has none and the new render
writes its own, and so do the renders it offered for reuse, which would hand out the new audio
under the old identity.

The batch reopens and closes again, with a fresh manifest, at its last job. A document of the API
has its chapters.json removed (pipeline/documents/stored.py reads the document as assembled while
it is there), so the workers assemble it again once the jobs are done, and document.finished goes
out again. The other chapters' jobs are untouched and assembly is deterministic, so their chapter
files come out the same, byte for byte.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from pipeline import reuse
from pipeline.db.models import Batch, Job, JobMetrics, JobStatus, utcnow
from pipeline.db.session import rows_matched
from pipeline.documents.batch import load_outline
from pipeline.documents.plan import place_of
from pipeline.documents.stored import (
    CHAPTERS_FILE,
    DOCUMENT_KIND,
    assembled,
    error_key,
    failure,
    file_key,
    ready_to_assemble,
)
from pipeline.errors import InputError
from pipeline.plural import counted
from pipeline.storage import ObjectStore

# New seeds are drawn from [1, SEED_LIMIT): they fit the INTEGER column on both databases.
SEED_LIMIT = 2**31
_FINISHED = (JobStatus.DONE, JobStatus.FAILED)
_ROWS_PER_UPDATE = 1000


class DocumentBusyError(InputError):
    """The document is still rendering or being assembled, or was cancelled: nothing is queued."""


@dataclass
class Rerender:
    """What a rerender queues: per chapter, its title, its jobs and its new seed."""

    batch_id: str
    titles: dict[int, str]
    seeds: dict[int, int]
    jobs: dict[int, list[str]] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=dict)  # job id -> its queue
    chars: dict[str, int] = field(default_factory=dict)  # client id -> its text's length

    @property
    def total(self) -> int:
        return sum(len(ids) for ids in self.jobs.values())

    def by_queue(self) -> dict[str, list[str]]:
        """The jobs by queue, in reading order, for send_messages once the caller has committed."""
        out: dict[str, list[str]] = {}
        for n in sorted(self.jobs):
            for job_id in self.jobs[n]:
                out.setdefault(self.queues[job_id], []).append(job_id)
        return out


def plan(
    session: Session, store: ObjectStore, batch_id: str, chapters: Iterable[int], *, rng: random.Random | None = None
) -> Rerender:
    """Check that ``chapters`` (1-based, as progress and chapters.json count them) can be rendered
    again, and draw their seeds; nothing is written. InputError for a batch that is no document or
    a chapter it does not have; DocumentBusyError while it renders, is assembled, or was cancelled."""
    outline = load_outline(store, batch_id)
    wanted = sorted(set(chapters))
    count = len(outline.chapters)
    if not wanted:
        raise InputError("name a chapter to render again")
    bad = [n for n in wanted if not 1 <= n <= count]
    if bad:
        raise InputError(
            f"document {batch_id} has {counted(count, 'chapter')}, numbered 1 to {count}: there is no chapter {bad[0]}"
        )
    batch = session.get(Batch, batch_id)
    if batch is None:
        raise InputError(f"document {batch_id} not found")
    if batch.cancelled_at is not None:
        raise DocumentBusyError(f"document {batch_id} was cancelled; submit it again instead")
    rows = session.execute(
        select(Job.id, Job.client_id, Job.status, Job.queue, Job.seed, func.length(Job.text))
        .where(Job.batch_id == batch_id)
        .order_by(Job.client_id)
    ).all()
    _check_idle(session, store, batch, rows)
    rng = rng or random.SystemRandom()
    out = Rerender(batch_id, {n: outline.chapters[n - 1] for n in wanted}, {})
    old_seeds: dict[int, set] = {n: set() for n in wanted}
    for job_id, client_id, status, queue, seed, chars in rows:
        place = place_of(client_id)
        if place is None or place.chapter not in old_seeds:
            continue
        if status == JobStatus.CANCELLED:
            raise DocumentBusyError(
                f"chapter {place.chapter} of document {batch_id} has a cancelled job "
                f"({client_id}); submit the document again instead"
            )
        out.jobs.setdefault(place.chapter, []).append(job_id)
        out.queues[job_id] = queue
        out.chars[client_id] = chars or 0
        old_seeds[place.chapter].add(seed)
    for n in wanted:
        if not out.jobs.get(n):
            raise InputError(f"chapter {n} of document {batch_id} has no jobs to render")
        out.seeds[n] = _new_seed(rng, old_seeds[n])
    return out


def _check_idle(session: Session, store: ObjectStore, batch: Batch, rows) -> None:
    """DocumentBusyError while a job is open, or while the workers assemble an API document."""
    still_open = sum(not status.terminal for _, _, status, *_ in rows)
    if still_open:
        raise DocumentBusyError(
            f"document {batch.id} is still rendering ({counted(still_open, 'job')} not "
            "finished); render a chapter again once it is done"
        )
    check_not_assembling(session, store, batch)


def check_not_assembling(session: Session, store: ObjectStore, batch: Batch) -> None:
    """DocumentBusyError while the workers assemble an API document (all its jobs done, neither
    chapters.json nor a failure there yet): an assembly that read the old audio could otherwise
    land after ``reopen`` removed chapters.json, and stand for the new audio."""
    if (
        batch.kind == DOCUMENT_KIND
        and assembled(store, batch.id) is None
        and failure(store, batch.id) is None
        and ready_to_assemble(session, [batch.id])
    ):
        raise DocumentBusyError(f"document {batch.id} is being assembled; try again once it is")


def _new_seed(rng: random.Random, taken: set) -> int:
    while True:
        seed = rng.randrange(1, SEED_LIMIT)
        if seed not in taken:
            return seed


def queue(session: Session, store: ObjectStore, planned: Rerender) -> int:
    """Queue the planned jobs again with their chapters' seeds and reopen the document; the
    caller commits, then sends ``planned.by_queue()`` (a job whose message is lost is re-sent by
    the reconciler). DocumentBusyError, and the caller rolls back, where a job moved meanwhile.
    Returns the jobs queued."""
    now = utcnow()
    moved = 0
    for n, ids in planned.jobs.items():
        for start in range(0, len(ids), _ROWS_PER_UPDATE):
            moved += rows_matched(
                session.execute(
                    update(Job)
                    .where(Job.id.in_(ids[start : start + _ROWS_PER_UPDATE]), Job.status.in_(_FINISHED))
                    .values(
                        status=JobStatus.QUEUED,
                        seed=planned.seeds[n],
                        queued_at=now,
                        finished_at=None,
                        error=None,
                        updated_at=now,
                    )
                    .execution_options(synchronize_session=False)
                )
            )
    if moved != planned.total:
        raise DocumentBusyError(f"document {planned.batch_id} changed while its chapters were queued again; try again")
    reopen(session, store, planned.batch_id, [job_id for chapter in planned.jobs.values() for job_id in chapter])
    return moved


def reopen(session: Session, store: ObjectStore, batch_id: str, job_ids: list[str]) -> None:
    """What goes with finished jobs of a batch queued to render again (here with a new seed, by a
    lexicon's apply with its latest version): their metrics rows, and the renders they offered
    for reuse, which would hand out the new audio under the old identity. The batch reopens, and
    a document of the API loses its chapters.json, so the workers assemble it again once the jobs
    are done; its chapters cached under the old audio's digests are found by no assembly
    (cache.py). The caller commits."""
    for start in range(0, len(job_ids), _ROWS_PER_UPDATE):
        session.execute(
            delete(JobMetrics)
            .where(JobMetrics.job_id.in_(job_ids[start : start + _ROWS_PER_UPDATE]))
            .execution_options(synchronize_session=False)
        )
    reuse.forget(session, job_ids)
    session.execute(update(Batch).where(Batch.id == batch_id).values(finished_at=None))
    # Before the commit: a commit that fails leaves a finished document without chapters.json,
    # which the sweep or POST /v1/documents/{id}/assemble mends; the other order could leave the
    # old chapters.json standing for the new audio.
    store.delete(file_key(batch_id, CHAPTERS_FILE))
    store.delete(error_key(batch_id))
