"""Signing secrets, one per API key, rotatable with a grace period during which the previous
secret also signs (two signatures in webhook-signature, as Standard Webhooks allows).

Secrets are stored as they are, not hashed: the sender needs them to compute each HMAC. Whoever
reads the database can forge webhooks; the same holds for every HMAC webhook sender.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.db.models import as_utc, utcnow
from pipeline.db.models_webhooks import WebhookSecret
from pipeline.webhooks.signing import new_secret


def get_or_create(session: Session, key_id: str) -> WebhookSecret:
    """The key's secret row, created on first use (two racing callers keep the first). The caller commits."""
    row = session.get(WebhookSecret, key_id)
    if row is not None:
        return row
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(
        dialect.insert(WebhookSecret)
        .values(key_id=key_id, secret=new_secret(), created_at=utcnow())
        .on_conflict_do_nothing()
    )
    return session.get_one(WebhookSecret, key_id, populate_existing=True)


def rotate(session: Session, key_id: str, *, grace_s: int, now: datetime | None = None) -> WebhookSecret:
    """Replace the key's secret; the old one keeps signing for ``grace_s`` seconds. The caller commits."""
    now = now or utcnow()
    row = get_or_create(session, key_id)
    old = row.secret
    session.execute(
        update(WebhookSecret)
        .where(WebhookSecret.key_id == key_id, WebhookSecret.secret == old)
        .values(
            secret=new_secret(), previous_secret=old, previous_until=now + timedelta(seconds=grace_s), rotated_at=now
        )
        .execution_options(synchronize_session=False)
    )
    return session.get_one(WebhookSecret, key_id, populate_existing=True)


def signing_secrets(row: WebhookSecret, now: datetime | None = None) -> list[str]:
    """The secrets that sign now: the current one, then the previous one while its grace lasts."""
    now = now or utcnow()
    out = [row.secret]
    if row.previous_secret and row.previous_until and now < as_utc(row.previous_until):
        out.append(row.previous_secret)
    return out
