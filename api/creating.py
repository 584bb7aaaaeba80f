"""Create a batch, honour Idempotency-Key, commit, enqueue: the path every creating route shares."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.app import ApiState
from api.idempotency import Claim, remember, replay
from pipeline.db.models import Batch, Job, utcnow
from pipeline.db.models_api import ApiKey
from pipeline.errors import ServiceUnavailableError
from pipeline.webhooks.ssrf import validate_callback_url
from worker.enqueue import enqueue_batch


def owner_columns(state: ApiState, key: ApiKey, *, kind: str, callback_url: str | None = None,
                  callback_events: list[str] | None = None) -> dict:
    """The batch columns the API sets: owner, kind, callback and expiry. A callback URL that
    resolves to an internal address is refused here (400) unless the operator allow-listed it."""
    if callback_url is not None:
        validate_callback_url(callback_url, state.settings.webhook_allow_hosts)
    return dict(owner_key_id=key.id, kind=kind, callback_url=callback_url, callback_events=callback_events,
                expires_at=utcnow() + timedelta(days=state.settings.result_ttl_days))


def create(state: ApiState, session: Session, claim: Claim | None, resource_type: str,
           build: Callable[[Session], Batch]) -> tuple[str, bool]:
    """(resource id, created). ``build`` inserts the batch (it may raise InputError); the resource
    is the batch, or its only job when ``resource_type`` is "job"."""
    existing = replay(session, claim, resource_type)
    if existing is not None:
        return existing, False
    batch = build(session)
    resource_id = batch.id if resource_type == "batch" else _only_job(session, batch.id)
    remember(session, claim, resource_type, resource_id)
    try:
        session.commit()
    except IntegrityError:  # the same Idempotency-Key won a race a moment ago
        session.rollback()
        existing = replay(session, claim, resource_type)
        if existing is None:
            raise
        return existing, False
    try:
        enqueue_batch(state.celery, state.sessions, batch.id, state.settings.jobs_per_task)
    except ServiceUnavailableError:
        _discard(state, batch.id)
        raise
    return resource_id, True


def _only_job(session: Session, batch_id: str) -> str:
    return session.scalars(select(Job.id).where(Job.batch_id == batch_id)).one()


def _discard(state: ApiState, batch_id: str) -> None:
    """Nothing half-written: a batch whose messages could not be sent is removed (as the CLI does)."""
    with state.sessions() as session:
        batch = session.get(Batch, batch_id)
        if batch is not None:
            session.delete(batch)
            session.commit()
