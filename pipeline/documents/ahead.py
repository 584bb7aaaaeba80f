"""A document assembled while it renders, by the process that waits for it (`synth submit -o`):
each chapter goes to a thread as soon as its last job is done, and into the chapter cache
(cache.py), while the other chapters render; once every job is done, the whole is assembled
from the cache into the output folder while the embedded worker shuts down: an m4b's whole file
is joined as its chapters come from the cache, the chapters that finished last still encoding
(assemble.py), so what is left after the last job is the longer of their encoding and the join.
The API's documents get the chapters ahead from the workers (worker/documents.py)."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db.models import Job, JobStatus
from pipeline.documents.assemble import CHAPTERS_AT_ONCE, Assembled
from pipeline.documents.batch import assemble_batch, prepare_chapter
from pipeline.documents.plan import place_of
from pipeline.errors import SynthError
from pipeline.storage import ObjectStore

log = logging.getLogger(__name__)


class DocumentAhead:
    """Called on each poll of the wait (``on_poll(session, batch_id)``); finish() once the wait
    ends, then assembled() for the files. A chapter that fails here is only said in the log: the
    assembly encodes it again, and fails there with the reason, where the user sees it."""

    def __init__(self, store: ObjectStore, output: Path) -> None:
        self.store = store
        self.output = output
        self.chapters_pool = ThreadPoolExecutor(CHAPTERS_AT_ONCE, thread_name_prefix="synth-chapter")
        self.whole_pool = ThreadPoolExecutor(1, thread_name_prefix="synth-assembly")
        self.started: dict[int, Future] = {}
        self.whole: Future | None = None
        self.chapters: set[int] | None = None
        self.sessions: sessionmaker[Session] | None = None

    def __call__(self, session: Session, batch_id: str) -> None:
        if self.whole is not None:
            return
        if self.sessions is None or self.chapters is None:
            self.sessions = sessionmaker(bind=session.get_bind(), expire_on_commit=False)
            self.chapters = _chapters(session.scalars(select(Job.client_id).where(Job.batch_id == batch_id)))
        open_ = _chapters(
            session.scalars(select(Job.client_id).where(Job.batch_id == batch_id, Job.status != JobStatus.DONE))
        )
        for n in sorted(self.chapters - open_ - self.started.keys()):
            self.started[n] = self.chapters_pool.submit(self._prepare, self.sessions, batch_id, n)
        if not open_:
            self.whole = self.whole_pool.submit(self._assemble, self.sessions, batch_id)

    def _prepare(self, sessions: sessionmaker[Session], batch_id: str, n: int) -> None:
        try:
            with sessions() as session:
                prepare_chapter(session, self.store, batch_id, n)
        except (SynthError, SQLAlchemyError, OSError) as e:
            log.warning("chapter %d of document %s was not encoded ahead: %s", n, batch_id, e)

    def _assemble(self, sessions: sessionmaker[Session], batch_id: str) -> tuple[Assembled, float]:
        started = time.monotonic()

        def ready(n: int) -> None:  # each chapter encoded once: the assembly finds it cached
            if n in self.started:
                wait([self.started[n]])

        with sessions() as session:
            return assemble_batch(session, self.store, batch_id, self.output, ready=ready), time.monotonic() - started

    def finish(self, *, cancel: bool = False) -> None:
        """Wait for what was started; with ``cancel``, only for what already runs."""
        self.chapters_pool.shutdown(wait=False, cancel_futures=cancel)
        self.whole_pool.shutdown(wait=False, cancel_futures=cancel)
        wait([*self.started.values(), *([self.whole] if self.whole else [])])

    def assembled(self) -> tuple[Assembled, float] | None:
        """The assembled document and the seconds its assembly took from the last job's end
        (as the wait saw it); None where the wait ended before every job was done. Raises what
        it raised."""
        return None if self.whole is None else self.whole.result()


def _chapters(client_ids) -> set[int]:
    return {place.chapter for place in map(place_of, client_ids) if place is not None}
