"""Opaque cursors: the sort key of the last row of a page, base64url-encoded JSON."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime

from fastapi import HTTPException

from pipeline.db.models import as_utc


def encode(*values) -> str:
    raw = json.dumps([v.isoformat() if isinstance(v, datetime) else v for v in values]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, n: int) -> list:
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        values = None
    if not isinstance(values, list) or len(values) != n:
        raise HTTPException(400, detail="malformed cursor: pass the next_cursor of a previous page")
    return values


def decode_item_cursor(cursor: str | None) -> tuple[int, str] | None:
    if cursor is None:
        return None
    line_no, job_id = _decode(cursor, 2)
    if not isinstance(line_no, int) or not isinstance(job_id, str) or abs(line_no) > 2**31:
        raise HTTPException(400, detail="malformed cursor: pass the next_cursor of a previous page")
    return line_no, job_id


def decode_batch_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    if cursor is None:
        return None
    created, batch_id = _decode(cursor, 2)
    try:
        return as_utc(datetime.fromisoformat(created)), str(batch_id)
    except (TypeError, ValueError):
        raise HTTPException(400, detail="malformed cursor: pass the next_cursor of a previous page") from None
