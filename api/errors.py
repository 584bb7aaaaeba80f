"""Every error as JSON that encodes: ``{"detail": ...}``, plus OpenAI's ``error`` object on the
OpenAI-compatible routes (/v1/audio/...), so its clients read our 4xx as they read OpenAI's.

Validation errors echo the input, which may hold what JSON cannot carry back (a lone surrogate from
``"\\ud800"``, a float overflowed to infinity from ``1e400``, NaN): those are written as escapes and
strings, never left to fail the response."""

from __future__ import annotations

import math

import redis
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.livehub import LiveCapacityError
from api.schemas import PATTERN_HINTS
from pipeline.errors import InputError, QuotaExceededError, ServiceUnavailableError, StorageError
from pipeline.lexicon.store import NotFound as LexiconNotFound

OPENAI_PREFIX = "/v1/audio/"


# OpenAI's error ``type`` and ``code`` by status, as its API answers: a key it does not know is an
# invalid_request_error with code invalid_api_key, a request-rate limit has type "requests" and
# code rate_limit_exceeded, and a failure of its own is a server_error; any other 4xx is an
# invalid_request_error without a code (its clients pick the exception class by status alone).
OPENAI_TYPES = {401: ("invalid_request_error", "invalid_api_key"), 429: ("requests", "rate_limit_exceeded")}


def openai_error(message: str, param: str | None = None, status: int = 400) -> dict:
    kind, code = OPENAI_TYPES.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return {"message": message, "type": kind, "param": param, "code": code}


def error_body(path: str, detail, param: str | None = None, status: int = 400) -> dict:
    body = {"detail": detail}
    if path.startswith(OPENAI_PREFIX):
        if isinstance(detail, list):  # a 422: its fields, the first named as OpenAI's param
            message = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}" for e in detail)
            fields = [e["loc"][1] for e in detail if len(e.get("loc", ())) > 1 and e["loc"][0] == "body"]
            param = param or (str(fields[0]) if fields else None)
        else:
            message = str(detail)
        body["error"] = openai_error(message, param, status)
    return encodable(body)


def unavailable_detail(e: Exception) -> str:
    """What is down, by name: a client's Redis or driver error alone ("Error 111 connecting to
    127.0.0.1:6379") does not say which of the API's services it is. The database's error is its
    driver's, without the SQL statement SQLAlchemy appends."""
    if isinstance(e, redis.RedisError):
        return f"Redis is unreachable: {e}"
    if isinstance(e, sqlalchemy.exc.OperationalError):
        return f"the database is unavailable: {str(e.orig).strip() or type(e.orig).__name__}"
    return str(e) or type(e).__name__


def error_response(
    request: Request, status: int, detail, *, param: str | None = None, headers: dict | None = None
) -> JSONResponse:
    return JSONResponse(error_body(request.url.path, detail, param, status), status_code=status, headers=headers)


def encodable(value):
    """``value`` with lone surrogates escaped and non-finite floats as strings ("inf", "nan")."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encodable(v) for v in value]
    return value


def _readable(error: dict) -> dict:
    """A pattern mismatch says what the field must be, not the regular expression it missed."""
    pattern = (error.get("ctx") or {}).get("pattern")
    hint = PATTERN_HINTS.get(pattern) if isinstance(pattern, str) else None
    if error.get("type") != "string_pattern_mismatch" or hint is None:
        return error
    return {**error, "msg": f"{error['loc'][-1]} {hint}"}


def install(app: FastAPI) -> None:
    """Errors as HTTP: bad input 400, a service down 503 (pipeline's errors and the clients' own)."""

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return error_response(
            request, e.status_code, e.detail, param=getattr(e, "param", None), headers=getattr(e, "headers", None)
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        return error_response(request, 422, [_readable(err) for err in jsonable_encoder(e.errors())])

    @app.exception_handler(InputError)
    async def _input(request: Request, e: InputError) -> JSONResponse:
        return error_response(request, 400, str(e))

    @app.exception_handler(LexiconNotFound)  # another key's lexicon is not found either
    async def _no_lexicon(request: Request, e: LexiconNotFound) -> JSONResponse:
        return error_response(request, 404, str(e))

    @app.exception_handler(QuotaExceededError)  # a key's daily quota (pipeline/usage.py)
    async def _quota(request: Request, e: QuotaExceededError) -> JSONResponse:
        return error_response(request, 429, str(e), headers={"Retry-After": str(e.retry_after)})

    @app.exception_handler(ServiceUnavailableError)
    @app.exception_handler(StorageError)
    @app.exception_handler(redis.RedisError)  # Redis down (rate limits, live audio)
    @app.exception_handler(sqlalchemy.exc.OperationalError)  # the database down or locked
    async def _unavailable(request: Request, e: Exception) -> JSONResponse:
        return error_response(request, 503, unavailable_detail(e), headers={"Retry-After": "5"})

    @app.exception_handler(LiveCapacityError)  # as many live streams as this process may serve
    async def _full(request: Request, e: LiveCapacityError) -> JSONResponse:
        return error_response(request, 503, f"{e}; try again shortly", headers={"Retry-After": "1"})
