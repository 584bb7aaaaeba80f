"""Standard Webhooks signatures (https://www.standardwebhooks.com, spec 1.0.0, symmetric scheme).

Sender: ``headers(msg_id, body, secrets)`` gives ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature`` ("v1,<base64 HMAC-SHA256 of '{id}.{timestamp}.{body}'>", several separated by
spaces while a rotated-out secret still signs). Receiver: ``verify(secret, headers, body)``.
Only the standard library is used, so a receiver can copy this file as it is.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets as _secrets
import time
from collections.abc import Iterable, Mapping

PREFIX = "whsec_"
VERSION = "v1"
SECRET_BYTES = 32  # the spec asks for 24 to 64 random bytes
DEFAULT_TOLERANCE = 300  # seconds a receiver accepts between webhook-timestamp and its clock


class WebhookVerificationError(Exception):
    """The request is not a valid webhook for this secret (bad or missing header, stale, forged)."""


def new_secret() -> str:
    return PREFIX + base64.b64encode(_secrets.token_bytes(SECRET_BYTES)).decode()


def _key(secret: str) -> bytes:
    raw = secret[len(PREFIX) :] if secret.startswith(PREFIX) else secret
    try:
        return base64.b64decode(raw, validate=True)
    except ValueError as e:
        raise ValueError("a webhook secret is 'whsec_' followed by base64") from e


def _as_bytes(body: bytes | str) -> bytes:
    return body.encode() if isinstance(body, str) else body


def sign(secret: str, msg_id: str, timestamp: int, body: bytes | str) -> str:
    """One signature, "v1,<base64>", over ``{msg_id}.{timestamp}.{body}``."""
    if "." in msg_id:
        raise ValueError("a webhook id must not contain '.'")
    signed = f"{msg_id}.{int(timestamp)}.".encode() + _as_bytes(body)
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return f"{VERSION},{base64.b64encode(digest).decode()}"


def headers(msg_id: str, body: bytes | str, secrets: Iterable[str], timestamp: int | None = None) -> dict[str, str]:
    """The three headers of one attempt, signed with every given secret (current first)."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    signatures = " ".join(sign(s, msg_id, ts, body) for s in secrets)
    if not signatures:
        raise ValueError("no secret to sign with")
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": signatures}


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance: int = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> None:
    """Check a received webhook; raise WebhookVerificationError if it is not authentic and fresh.

    ``headers`` may be any mapping; names are matched case-insensitively. Any one valid "v1"
    signature in the space-separated list is enough (the sender signs with old and new secrets
    during a rotation). The timestamp must be within ``tolerance`` seconds of ``now``.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id, ts_text, sig_header = (lower[h] for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    except KeyError as e:
        raise WebhookVerificationError(f"missing header {e.args[0]}") from e
    try:
        ts = int(ts_text)
    except ValueError as e:
        raise WebhookVerificationError(f"webhook-timestamp is not an integer: {ts_text!r}") from e
    current = time.time() if now is None else now
    if abs(current - ts) > tolerance:
        raise WebhookVerificationError(f"webhook-timestamp {ts} is more than {tolerance} s from now")
    try:
        expected = sign(secret, msg_id, ts, body).split(",", 1)[1]
    except ValueError as e:
        raise WebhookVerificationError(str(e)) from e
    for candidate in sig_header.split():
        version, _, value = candidate.partition(",")
        if version == VERSION and hmac.compare_digest(value.encode(), expected.encode()):
            return
    raise WebhookVerificationError("no signature matches")
