"""Opaque cursors: the sort key of the last row of a page, base64url-encoded JSON. A cursor comes
back from the client, so every part of it is checked (type, range, shape) before it reaches SQL:
an edited one is a 400, never a database error."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime

from fastapi import HTTPException

from api.ids import could_exist
from pipeline.db.models import as_utc

MAX_LINE_NO = 2**31 - 1  # line numbers are a 32-bit INTEGER column


def encode(*values) -> str:
    raw = json.dumps([v.isoformat() if isinstance(v, datetime) else v for v in values]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _malformed() -> HTTPException:
    return HTTPException(400, detail="malformed cursor: pass the next_cursor of a previous page")


def _decode(cursor: str) -> tuple[object, str]:
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeError):
        values = None
    if not isinstance(values, list) or len(values) != 2 or not could_exist(values[1]):
        raise _malformed()
    return values[0], values[1]


def decode_item_cursor(cursor: str | None) -> tuple[int, str] | None:
    if cursor is None:
        return None
    line_no, job_id = _decode(cursor)
    if type(line_no) is not int or not 0 <= line_no <= MAX_LINE_NO:  # bool is an int: refused too
        raise _malformed()
    return line_no, job_id


def decode_batch_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    if cursor is None:
        return None
    created, batch_id = _decode(cursor)
    if not isinstance(created, str):
        raise _malformed()
    try:
        when = as_utc(datetime.fromisoformat(created))
    except (TypeError, ValueError, OverflowError):
        raise _malformed() from None
    return when, batch_id
