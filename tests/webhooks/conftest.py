"""Fixtures of the webhook tests: an API key with its signing secret, a real receiver on a
loopback port (allowed by the operator allow-list), settings with a retry schedule in tenths of
seconds, and a batch owned by the key."""

import pytest

from pipeline.api_keys import create_key
from pipeline.db.models_webhooks import WebhookAttempt, WebhookDelivery
from pipeline.submit import BatchOptions, Item, create_item_batch
from pipeline.webhooks import secrets
from synth_testkit.webhook_receiver import Receiver


@pytest.fixture
def wh_settings(settings):
    return settings.with_overrides(
        webhook_allow_hosts=("127.0.0.0/8",), webhook_retry_schedule=(0.2, 0.4, 0.8, 1.6), webhook_timeout=5.0
    )


@pytest.fixture
def key(sessions):
    """(key id, its signing secret)."""
    with sessions() as s:
        new = create_key(s, name="webhooks-test")
        secret = secrets.get_or_create(s, new.key.id).secret
        s.commit()
    return new.key.id, secret


@pytest.fixture
def receiver(key):
    with Receiver(secrets=[key[1]], fail_first=2) as r:
        yield r


def make_batch(sessions, settings, key_id, url, texts, *, events=None, name="hooks"):
    with sessions() as s:
        batch = create_item_batch(
            s,
            settings,
            [Item(text=t) for t in texts],
            BatchOptions(name=name),
            source="test",
            owner_key_id=key_id,
            webhook_url=url,
            webhook_events=events,
        )
        s.commit()
        return batch.id


def deliveries_and_attempts(sessions):
    from sqlalchemy import select

    with sessions() as s:
        rows = s.scalars(select(WebhookDelivery)).all()
        attempts = s.scalars(
            select(WebhookAttempt).order_by(WebhookAttempt.delivery_id, WebhookAttempt.attempt_no)
        ).all()
    by = {d.id: [] for d in rows}
    for a in attempts:
        by[a.delivery_id].append(a)
    return {d.id: d for d in rows}, by
