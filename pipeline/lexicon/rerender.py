"""Re-render the jobs of a batch that a lexicon change touches, and only those.

A job rendered with version v reads differently under the latest version only where its text
contains an entry that differs between the two (added, removed or changed): those entries are
compiled into a lexicon of their own, and a job is touched when that lexicon finds anything in
its text. Touched jobs go back to the queue with the latest version; the others keep their rows,
their version and their stored audio, which no worker rewrites. The batch reopens and, at its last
job, closes with a fresh manifest, as a retry does (lifecycle.retry); a document is assembled
again, as after a chapter rendered again (pipeline/documents/rerender.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from pipeline.db.models import Batch, Job, JobStatus, utcnow
from pipeline.db.models_lexicons import LOCAL_OWNER, Lexicon
from pipeline.db.session import rows_matched
from pipeline.documents.rerender import check_not_assembling, reopen
from pipeline.errors import InputError
from pipeline.lexicon.apply import Compiled
from pipeline.lexicon.store import NotFound, changed_between, entries_at
from pipeline.storage import ObjectStore

_FINISHED = (JobStatus.DONE, JobStatus.FAILED)


@dataclass
class Plan:
    rerendered: int = 0
    untouched: int = 0
    by_queue: dict[str, list[str]] = field(default_factory=dict)  # for send_messages, after commit


def plan(session: Session, store: ObjectStore, lexicon: Lexicon, *, owner: str, batch_id: str) -> Plan:
    """Queue the touched jobs again (a conditional UPDATE: DONE or FAILED, still at their old
    version), with what goes with them as for a document's chapter rendered again (reopen: their
    metrics and stored renders go, a document is assembled again); the caller commits, then sends
    ``by_queue``. InputError for a batch made with another lexicon, not finished, or a document
    being assembled; NotFound for a batch that is not the owner's."""
    batch = _owned_batch(session, owner, batch_id)
    _check_applies(session, store, lexicon, batch)
    out = Plan()
    touched = _touched(session, lexicon, batch.id, out)
    now = utcnow()
    for version, ids in touched.items():
        for start in range(0, len(ids), 1000):
            out.rerendered += rows_matched(
                session.execute(
                    update(Job)
                    .where(
                        Job.id.in_(ids[start : start + 1000]), Job.status.in_(_FINISHED), Job.lexicon_version == version
                    )
                    .values(
                        status=JobStatus.QUEUED,
                        lexicon_version=lexicon.version,
                        queued_at=now,
                        finished_at=None,
                        error=None,
                        updated_at=now,
                    )
                    .execution_options(synchronize_session=False)
                )
            )
    moved = [job_id for ids in touched.values() for job_id in ids]
    if out.rerendered != len(moved):  # another apply moved one meanwhile
        raise InputError(f"batch {batch.id} changed while its jobs were queued again; try again")
    if moved:
        session.execute(update(Batch).where(Batch.id == batch.id).values(lexicon_version=lexicon.version))
        reopen(session, store, batch.id, moved)
    return out


def _check_applies(session: Session, store: ObjectStore, lexicon: Lexicon, batch: Batch) -> None:
    """InputError unless ``batch`` was made with ``lexicon``, is finished and is not being assembled."""
    if batch.lexicon_id != lexicon.id:
        raise InputError(
            f"batch {batch.id} was made with {'no lexicon' if batch.lexicon_id is None else 'another lexicon'}"
            f", not {lexicon.name!r}"
        )
    unfinished = session.scalar(select(func.count()).where(Job.batch_id == batch.id, Job.status.not_in(_FINISHED)))
    if unfinished:
        raise InputError(
            f"batch {batch.id} has {unfinished} jobs not finished (or cancelled); apply the lexicon once they are done"
        )
    check_not_assembling(session, store, batch)


def _touched(session: Session, lexicon: Lexicon, batch_id: str, out: Plan) -> dict[int, list[str]]:
    """The jobs whose text reads otherwise under the lexicon's latest version than under the one
    they were rendered with, by that version; counted in ``out`` (untouched, and by queue)."""
    latest = entries_at(session, lexicon.id, lexicon.version)
    rows = session.execute(
        select(Job.id, Job.text, Job.queue, Job.lexicon_version)
        .where(Job.batch_id == batch_id)
        .order_by(Job.line_no, Job.client_id)
    ).all()
    changes: dict[int, Compiled] = {}
    touched: dict[int, list[str]] = {}
    for job_id, text, queue, version in rows:
        assert version is not None  # the batch's lexicon, checked above: its jobs have a version of it
        if version not in changes:
            changes[version] = Compiled(
                changed_between(entries_at(session, lexicon.id, version), latest) if version != lexicon.version else []
            )
        said = changes[version].apply(text, takes_phonemes=True)
        if said.replaced or said.skipped_phonemes:
            touched.setdefault(version, []).append(job_id)
            out.by_queue.setdefault(queue, []).append(job_id)
        else:
            out.untouched += 1
    return touched


def _owned_batch(session: Session, owner: str, batch_id: str) -> Batch:
    if "\x00" in batch_id:  # never a batch id or name, and PostgreSQL refuses it in a query
        raise NotFound(f"batch {batch_id[:64]!r} not found")
    owner_is = Batch.owner_key_id.is_(None) if owner == LOCAL_OWNER else Batch.owner_key_id == owner
    batch = (
        session.scalars(select(Batch).where(Batch.id == batch_id, owner_is)).first()
        or session.scalars(
            select(Batch).where(Batch.name == batch_id, owner_is).order_by(Batch.created_at.desc())
        ).first()
    )
    if batch is None:
        raise NotFound(f"batch {batch_id[:64]!r} not found")
    return batch
