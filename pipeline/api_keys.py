"""API keys: created once, shown once, stored hashed.

A key is ``sk_synth_`` + 32 random bytes (urlsafe base64). It is stored as its SHA-256: with 256 bits
of entropy a key cannot be guessed or brute-forced from its hash, so a slow password hash (bcrypt,
argon2) would add latency to every request and no safety. Lookup is by hash, so the plaintext is
never kept anywhere.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from pipeline.db.models import new_id, utcnow
from pipeline.db.models_api import ApiKey
from pipeline.db.session import rows_matched
from pipeline.errors import InputError

KEY_PREFIX = "sk_synth_"
_SHOWN_CHARS = 4  # of the random part, kept in clear so a listing tells keys apart


@dataclass(frozen=True)
class NewKey:
    key: ApiKey
    plaintext: str  # shown once to the operator, never stored


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def create_key(session: Session, *, name: str) -> NewKey:
    """Insert a new key; the caller commits and shows ``plaintext`` once."""
    name = name.strip()
    if not name:
        raise InputError("a key needs a name")
    plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        id=new_id(),
        name=name[:200],
        prefix=plaintext[: len(KEY_PREFIX) + _SHOWN_CHARS],
        key_hash=hash_key(plaintext),
        created_at=utcnow(),
    )
    session.add(key)
    session.flush()
    return NewKey(key=key, plaintext=plaintext)


def list_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)))


def revoke_key(session: Session, key_id: str) -> bool:
    """Revoke by id; False when no active key has that id. The caller commits, then cancels the
    key's queued jobs (lifecycle.cancel_owned); the API ends its open streams (api/revocation.py)."""
    moved = rows_matched(
        session.execute(
            update(ApiKey).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None)).values(revoked_at=utcnow())
        )
    )
    return moved == 1


def revoked_among(session: Session, key_ids: list[str]) -> list[str]:
    """Which of these keys are revoked (or gone)."""
    active = set(session.scalars(select(ApiKey.id).where(ApiKey.id.in_(key_ids), ApiKey.revoked_at.is_(None))))
    return [key_id for key_id in key_ids if key_id not in active]


def authenticate(session: Session, plaintext: str) -> ApiKey | None:
    """The active key with this plaintext, or None."""
    if not plaintext.startswith(KEY_PREFIX):
        return None
    return session.scalars(
        select(ApiKey).where(ApiKey.key_hash == hash_key(plaintext), ApiKey.revoked_at.is_(None))
    ).first()


def find_key(session: Session, ref: str) -> ApiKey:
    """The active key with this id, or the one active key with this name (InputError otherwise)."""
    key = session.scalars(select(ApiKey).where(ApiKey.id == ref, ApiKey.revoked_at.is_(None))).first()
    if key is not None:
        return key
    named = list(session.scalars(select(ApiKey).where(ApiKey.name == ref, ApiKey.revoked_at.is_(None))))
    if len(named) > 1:
        raise InputError(f"{len(named)} active keys are named {ref!r}: give the key's id (see `synth keys list`)")
    if not named:
        raise InputError(f"no active key with id or name {ref!r} (see `synth keys list`)")
    return named[0]
