"""Documents submitted through the API (POST /v1/documents), assembled on the workers:

- after every run of the render task (task_postrun, as worker/webhooks.py hooks in), a document
  batch whose jobs are now all done is sent to "synth.assemble_document", and each chapter of one
  whose jobs are now all done, while others still render, to "synth.encode_chapter", which
  encodes it into the chapter cache, where the assembly finds it (pipeline/documents/cache.py):
  what is left once the last job is done is the chapters that finished last and the join;
- that task runs on the verify queue, which the CPU workers serve (`synth worker --verify`, and
  every CPU render worker after its own queues): assembly is ffmpeg and numpy on the CPU, and a
  GPU worker's slots are for rendering. It writes the files under the batch's prefix
  (pipeline/documents/stored.py) and then the document.finished event into the webhook outbox;
- "synth.sweep_documents", on the beat schedule, sends the assembly of documents done in the last
  day yet neither assembled nor failed: their message was lost.

Its message is acked once the task returns (task_acks_late), so a worker killed mid-assembly
leaves it to be delivered again; the assembly is idempotent (the same objects, chapters.json
last), and the event is recorded once by its id.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from celery import Celery
from celery.signals import task_postrun
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from pipeline.db.models import Batch, Job, utcnow
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.documents.batch import prepare_chapter
from pipeline.documents.stored import assemble_to_store, chapters_done, ready_to_assemble, record_failure, unassembled
from pipeline.errors import PermanentError, RetryableError, SynthError
from pipeline.messages import ASSEMBLE_TASK, CHAPTER_TASK, RENDER_TASK
from pipeline.routing import VERIFY_QUEUE
from pipeline.storage import make_store
from pipeline.webhooks import outbox
from worker.backoff import backoff

log = logging.getLogger(__name__)
SWEEP_TASK = "synth.sweep_documents"
_lock = threading.Lock()


def register(app: Celery) -> None:
    settings = app.synth_settings

    @app.task(name=ASSEMBLE_TASK, bind=True, max_retries=settings.max_retries, shared=False)
    def assemble_document(self, batch_id: str) -> dict:
        sessions, store = _services(app)
        batch_id = str(batch_id)
        try:
            with sessions() as session:
                if not ready_to_assemble(session, [batch_id]):  # cancelled, reopened or deleted since
                    return {"assembled": False}
                chapters, wrote = assemble_to_store(session, store, batch_id)
                batch = session.get(Batch, batch_id)
                ids = outbox.emit_document_finished(session, batch, chapters) if batch is not None else []
                session.commit()
        except (RetryableError, OperationalError) as e:
            raise self.retry(exc=e, countdown=backoff(self.request.retries, settings.retry_backoff_max)) from e
        except PermanentError as e:  # the same input fails the same way: said, not retried
            log.warning("document %s not assembled: %s", batch_id, e)
            record_failure(store, batch_id, str(e))
            return {"assembled": False, "error": str(e)}
        _deliver(app, ids)
        return {"assembled": True, "wrote": wrote, "files": len(chapters["files"])}

    @app.task(name=CHAPTER_TASK, shared=False, ignore_result=True)
    def encode_chapter(batch_id: str, chapter: int) -> bool:
        sessions, store = _services(app)
        try:
            with sessions() as session:
                return prepare_chapter(session, store, str(batch_id), int(chapter))
        except (SynthError, OperationalError, OSError) as e:
            # Only work done ahead: the document's assembly encodes the chapter again, and a
            # failure there is recorded for GET /v1/documents/{id}.
            log.warning("chapter %s of document %s not encoded ahead: %s", chapter, batch_id, e)
            return False

    @app.task(name=SWEEP_TASK, shared=False, ignore_result=True)
    def sweep_documents() -> int:
        sessions, store = _services(app)
        with sessions() as session:
            lost = unassembled(session, store, since=utcnow() - timedelta(days=1))
        send_assembly(app, lost)
        return len(lost)

    schedule = dict(app.conf.beat_schedule or {})
    schedule["sweep-documents"] = {"task": SWEEP_TASK, "schedule": 600.0, "options": {"queue": VERIFY_QUEUE}}
    app.conf.beat_schedule = schedule
    task_postrun.connect(_after_render, weak=False, dispatch_uid="synth.documents.after_render")


def send_assembly(app: Celery, batch_ids: list[str]) -> None:
    for batch_id in batch_ids:
        app.send_task(ASSEMBLE_TASK, args=[batch_id], queue=VERIFY_QUEUE, routing_key=VERIFY_QUEUE)


def _after_render(sender=None, args=None, kwargs=None, **_) -> None:
    """task_postrun of any task; acts on synth.render only, in the thread that ran it."""
    if getattr(sender, "name", None) != RENDER_TASK or ASSEMBLE_TASK not in sender.app.tasks:
        return
    app = sender.app
    job_ids = (args or [None])[0] or (kwargs or {}).get("job_ids") or []
    if not job_ids:
        return
    sessions, _ = _services(app)
    try:
        with sessions() as session:
            jobs = session.execute(select(Job.batch_id, Job.client_id).where(Job.id.in_(list(job_ids)))).all()
            ready = ready_to_assemble(session, list({batch_id for batch_id, _ in jobs}))
            # A document that is done is assembled whole, its last chapters with it.
            chapters = chapters_done(session, [(b, c) for b, c in jobs if b not in ready])
        send_assembly(app, ready)
        for batch_id, n in chapters:
            app.send_task(CHAPTER_TASK, args=[batch_id, n], queue=VERIFY_QUEUE, routing_key=VERIFY_QUEUE)
    except (OperationalError, KombuOperationalError, OSError):
        # The jobs' outcomes stand. A message lost here leaves the document reading "assembling"
        # until the sweep (every 10 minutes) or POST /v1/documents/{id}/assemble sends it again.
        log.exception("could not send the assembly of the documents of %d jobs", len(job_ids))


def _deliver(app: Celery, delivery_ids: list[str]) -> None:
    from worker.webhooks import enqueue

    enqueue(app, delivery_ids)


def _services(app: Celery):
    """The database and store of this process, built on first use: a verify-only worker loads no
    engine, so it has no render runtime to borrow them from."""
    with _lock:
        services = getattr(app, "synth_document_services", None)
        if services is None:
            settings = app.synth_settings
            services = app.synth_document_services = (
                make_sessionmaker(make_engine(settings.sqlalchemy_url)),
                make_store(settings),
            )
        return services
