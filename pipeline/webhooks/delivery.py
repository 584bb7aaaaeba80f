"""One delivery attempt: claim it, check the URL again (SSRF), sign, POST to the checked address,
log the attempt, and say when the next one is due. The Celery task (worker/webhooks.py) only
schedules the next message.

DNS rebinding: the URL is resolved and checked right before the attempt, and the request goes to
that checked IP (the URL's host is replaced by it) with the original name in the Host header and,
for https, as the TLS server name (httpx's "sni_hostname" extension), so the certificate is still
verified against the name. No second DNS lookup happens between the check and the connection.
Redirects are not followed (Standard Webhooks counts a 3xx as a failure), so a receiver cannot
bounce the request to an internal address either.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db.models import utcnow
from pipeline.db.models_api import ApiKey
from pipeline.settings import Settings
from pipeline.webhooks import deliveries, secrets, signing, ssrf

USER_AGENT = "synth-webhooks/1"
GONE = 410  # the receiver wants no more: stop retrying (Standard Webhooks, "Delivery success and failure")


@dataclass(frozen=True)
class DeliveryConfig:
    allow: ssrf.AllowList
    schedule: tuple[float, ...]  # delays before retries 1, 2, ... (the first attempt is immediate)
    timeout: float

    @classmethod
    def from_settings(cls, settings: Settings) -> DeliveryConfig:
        return cls(
            allow=ssrf.AllowList.parse(settings.webhook_allow_hosts),
            schedule=tuple(settings.webhook_retry_schedule),
            timeout=settings.webhook_timeout,
        )


@dataclass(frozen=True)
class Result:
    delivery_id: str
    attempt_no: int
    claimed: bool  # False: another message had this attempt, or it is closed
    succeeded: bool = False
    retry_in: float | None = None  # seconds until the next attempt; None: no next attempt


def retry_delay(attempt_no: int, schedule: Sequence[float], rng: random.Random | None = None) -> float | None:
    """Delay before attempt ``attempt_no + 1`` with full jitter (uniform in [0, scheduled delay]);
    None when the schedule is used up."""
    if attempt_no > len(schedule):
        return None
    return (rng or random).uniform(0.0, float(schedule[attempt_no - 1]))


def deliver(sessions: sessionmaker[Session], config: DeliveryConfig, delivery_id: str, attempt_no: int) -> Result:
    with sessions() as session:
        delivery = deliveries.claim(session, delivery_id, attempt_no)
        if delivery is None:
            return Result(delivery_id, attempt_no, claimed=False)
        assert delivery.key_id is not None  # the outbox writes a delivery only for an owned batch
        keys = _signing_keys(session, delivery.key_id)
        started, t0 = utcnow(), time.monotonic()
        error: str | None
        if isinstance(keys, str):  # nobody may receive it any more: said why, never sent
            status, error, address, permanent = None, keys, None, True
        else:
            status, error, address, permanent = _attempt(config, delivery.url, delivery.id, delivery.body, keys)
        succeeded = status is not None and 200 <= status < 300
        delay = None if succeeded or permanent else retry_delay(attempt_no, config.schedule)
        if delay is None and not succeeded and not permanent:
            error = f"{error}; gave up after {attempt_no} attempts"
        deliveries.record(
            session,
            delivery,
            deliveries.AttemptRecord(
                attempt_no=attempt_no,
                url=delivery.url,
                address=address,
                started_at=started,
                duration_ms=round((time.monotonic() - t0) * 1000, 2),
                status_code=status,
                error=error,
                next_attempt_at=None if delay is None else utcnow() + timedelta(seconds=delay),
                succeeded=succeeded,
            ),
        )
        session.commit()
    return Result(delivery_id, attempt_no, claimed=True, succeeded=succeeded, retry_in=delay)


def _signing_keys(session: Session, key_id: str) -> list[str] | str:
    """The secrets to sign with, or why nothing may be sent: the key that owns the webhook was
    revoked (its work stops with it) or deleted (nobody is left to verify a signature)."""
    key = session.get(ApiKey, key_id)
    if key is not None and key.revoked_at is not None:
        return "the API key that owns this webhook was revoked"
    try:
        keys = secrets.signing_secrets(secrets.get_or_create(session, key_id))
        session.commit()
    except IntegrityError:
        session.rollback()
        keys = []
    return keys or "the API key that owns this webhook no longer exists"


def _attempt(
    config: DeliveryConfig, url: str, msg_id: str, body: str, keys: list[str]
) -> tuple[int | None, str | None, str | None, bool]:
    """(status code, error, address, permanent): one signed POST to the checked address."""
    try:
        target = ssrf.validate_webhook_url(url, config.allow)
    except ssrf.WebhookURLError as e:
        return None, f"refused: {e}", None, True
    payload = body.encode()
    headers = signing.headers(msg_id, payload, keys)
    last_error = None
    for address in target.addresses:
        try:
            status = post_pinned(target, address, payload, headers, config.timeout)
        except httpx.ConnectError as e:  # try the host's next address
            last_error = f"connect to {address}: {e}"
            continue
        except httpx.HTTPError as e:
            return None, f"{type(e).__name__}: {e}"[:2000], str(address), False
        error = None if 200 <= status < 300 else f"HTTP {status}"
        return status, error, str(address), status == GONE
    return None, last_error, None, False


def post_pinned(
    target: ssrf.WebhookTarget,
    address: ssrf.IPAddress,
    body: bytes,
    headers: dict[str, str],
    timeout: float,
    verify: ssl.SSLContext | bool = True,
) -> int:
    """POST ``body`` to ``address`` as if to the URL's host; return the status code. The response
    body is not read (a receiver cannot make us download anything). ``verify``: TLS trust (the
    system's CAs by default; tests pass a context trusting their own CA)."""
    parts = urlsplit(target.url)
    literal = f"[{address}]" if address.version == 6 else str(address)
    pinned = urlunsplit((target.scheme, f"{literal}:{target.port}", parts.path or "/", parts.query, ""))
    host = f"[{target.host}]" if ":" in target.host else target.host
    default_port = 443 if target.scheme == "https" else 80
    all_headers = {
        **headers,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "host": host if target.port == default_port else f"{host}:{target.port}",
    }
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False, verify=verify) as client:
        request = client.build_request("POST", pinned, content=body, headers=all_headers, extensions=extensions)
        response = client.send(request, stream=True)
        response.close()
        return response.status_code
