"""Idempotency-Key on creating POSTs: the same key with the same body answers with the resource the
first request created; the same key with a different body is a 409. One record per (API key,
Idempotency-Key), written in the same transaction as the resource, so a race between two identical
requests leaves one resource (the loser's insert violates the unique constraint and is rolled back)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from fastapi import HTTPException
from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline.db.models import Batch, Job, new_id, utcnow
from pipeline.db.models_api import IdempotencyRecord

MAX_KEY_CHARS = 200


@dataclass(frozen=True)
class Claim:
    """An Idempotency-Key presented with a request."""

    key_id: str
    idempotency_key: str
    fingerprint: str


def fingerprint(route: str, *parts: bytes) -> str:
    h = hashlib.sha256(route.encode())
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def canonical(**fields) -> bytes:
    """Fields as one fingerprint part: JSON, keys sorted, so no field's text can pass for another
    field's (joined with a separator, a name holding "|https://..." read as a webhook URL)."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def make_claim(key_id: str, header: str | None, route: str, *parts: bytes) -> Claim | None:
    if header is None:
        return None
    if not header or len(header) > MAX_KEY_CHARS or not header.isprintable():
        raise HTTPException(400, detail=f"Idempotency-Key must be 1 to {MAX_KEY_CHARS} printable characters")
    return Claim(key_id, header, fingerprint(route, *parts))


def replay(session: Session, claim: Claim | None, resource_type: str) -> str | None:
    """The id of the resource this claim already created, None if new; 409 if the key was used
    for a different request; 410 if its resource was deleted since (a retry must not quietly make
    and bill a new one, nor serve what was deleted)."""
    if claim is None:
        return None
    record = session.scalars(
        select(IdempotencyRecord).where(
            IdempotencyRecord.key_id == claim.key_id,
            IdempotencyRecord.idempotency_key == claim.idempotency_key,
        )
    ).first()
    if record is None:
        return None
    if record.fingerprint != claim.fingerprint or record.resource_type != resource_type:
        raise HTTPException(
            409, detail="this Idempotency-Key was used with a different request; use a new key for a new request"
        )
    if session.get(Job if resource_type == "job" else Batch, record.resource_id) is None:
        raise HTTPException(
            410,
            detail=f"the {resource_type} this Idempotency-Key created ({record.resource_id}) "
            "was deleted; use a new key for a new request",
        )
    return record.resource_id


def remember(session: Session, claim: Claim | None, resource_type: str, resource_id: str) -> None:
    """Add the record to the session; it commits with the resource."""
    if claim is not None:
        session.add(
            IdempotencyRecord(
                id=new_id(),
                key_id=claim.key_id,
                idempotency_key=claim.idempotency_key,
                fingerprint=claim.fingerprint,
                resource_type=resource_type,
                resource_id=resource_id,
                created_at=utcnow(),
            )
        )
