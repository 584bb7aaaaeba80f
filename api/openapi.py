"""The OpenAPI document, made to tell the truth: a client generated from /openapi.json can rely on it.

FastAPI documents what the route signatures say; this adds what they cannot: the errors every
authenticated operation can answer (401, 429, 503 and, with a body, 413), the 400/409/410 of the
creating routes and cursors, the audio media types of /audio and /stream, the OpenAI error object
of /v1/audio/..., and the limits that come from settings (voices, formats, sample rates, text
length, items per batch), so input the document calls valid is input the API accepts."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api.errors import OPENAI_PREFIX
from api.routes.speech import OPENAI_VOICES
from api.streaming import CONTENT_TYPES, SPEECH_FORMATS
from pipeline.formats import get_format
from pipeline.engines.registry import engine_voices
from pipeline.settings import FORMATS, Settings
from pipeline.submit import SAMPLE_RATES

NO_NUL = "^[^\\x00]*$"  # text SQL can store
SPOKEN = "^[^\\x00]*[^\\x00\\s][^\\x00]*$"  # ... and not only spaces
_ITEMS = ("BatchCreate", "ItemIn", "JobCreate")  # request bodies with voice, format, rate, text
ERROR = {"type": "object", "required": ["detail"], "properties": {"detail": {"type": "string"}}}
OPENAI_ERROR = {
    "type": "object",
    "required": ["detail", "error"],
    "properties": {
        "detail": {},
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        },
    },
}
READINESS = {
    "type": "object",
    "required": ["status", "checks"],
    "properties": {
        "status": {"enum": ["ok", "unavailable"]},
        "checks": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
STORED_TYPES = sorted({get_format(f).content_type for f in FORMATS})

_AUTH = {
    401: "no valid API key",
    429: "rate limit exceeded for this key, or (creating work) its daily quota is used (Retry-After)",
    503: "the database, Redis or storage is unreachable (Retry-After)",
}
_CREATE = {
    400: "invalid input: unknown voice, format or sample rate, text over the limit, a webhook URL "
    "to an internal address, a malformed Idempotency-Key ...",
    409: "this Idempotency-Key was used with a different request",
    410: "this Idempotency-Key created a resource that was deleted since",
}


def install(app: FastAPI, settings: Settings) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            app.openapi_schema = truthful(doc, settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to amend the document


def truthful(doc: dict[str, Any], settings: Settings) -> dict[str, Any]:
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR
    schemas["OpenAIError"] = OPENAI_ERROR
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            _responses(path, method, op)
    upload = doc["paths"]["/v1/batches/upload"]["post"]["requestBody"]["content"]["multipart/form-data"]
    form = upload["schema"]["$ref"].rsplit("/", 1)[-1]
    _limits(schemas, settings, form=form)
    _dependent_fields(schemas, form=form)
    document = doc["paths"]["/v1/documents"]["post"]["requestBody"]["content"]["multipart/form-data"]
    document_form = document["schema"]["$ref"].rsplit("/", 1)[-1]
    _document_limits(schemas, settings, form=document_form)
    return doc


def _responses(path: str, method: str, op: dict) -> None:
    responses = op["responses"]
    names = {p["name"] for p in op.get("parameters", [])}
    add: dict[int, str] = {}
    if op.get("security"):
        add |= _AUTH
    if "requestBody" in op:
        add[413] = "request body over SYNTH_API_MAX_BODY_BYTES"
    if "Idempotency-Key" in names:
        add |= _CREATE
    elif "requestBody" in op:
        add[400] = _CREATE[400]
    if "cursor" in names:
        add[400] = responses.get("400", {}).get("description") or "malformed cursor"
    if path.startswith("/dashboard"):
        add[401] = "SYNTH_DASHBOARD_TOKEN is set and was not given"
    for status, description in add.items():
        responses.setdefault(str(status), {"description": description})
    error: dict[str, Any] = {
        "$ref": "#/components/schemas/" + ("OpenAIError" if path.startswith(OPENAI_PREFIX) else "Error")
    }
    if path == "/readyz":
        error = READINESS
        responses["200"]["content"] = {"application/json": {"schema": READINESS}}
    for status, response in responses.items():
        if status.startswith(("4", "5")) and (status != "422" or path.startswith(OPENAI_PREFIX)):
            response["content"] = {"application/json": {"schema": error}}
    if path == "/v1/jobs/{job_id}/audio":
        responses["200"]["content"] = {t: {"schema": {"type": "string", "format": "binary"}} for t in STORED_TYPES}
    if path == "/v1/jobs/{job_id}/stream":
        types = sorted({CONTENT_TYPES["wav"], CONTENT_TYPES["pcm"], *STORED_TYPES})
        responses["200"]["content"] = {t: {"schema": {"type": "string", "format": "binary"}} for t in types}
    if path == "/v1/documents/{document_id}/files/{name}":
        types = [
            "audio/mp4",
            "audio/mpeg",
            "audio/wav",
            "audio/flac",
            "application/json",
            "text/vtt",
            "application/x-subrip",
        ]
        responses["200"]["content"] = {t: {"schema": {"type": "string", "format": "binary"}} for t in types}
    if path == "/metrics":
        responses["200"]["content"] = {"text/plain": {"schema": {"type": "string"}}}


def _limits(schemas: dict, settings: Settings, *, form: str) -> None:
    """Settings' limits as schema constraints; every other string gets "no NUL" (SQL text)."""
    voices = list(engine_voices(settings.engine_settings()))
    for name in (*_ITEMS, form):
        props = schemas[name]["properties"]
        _narrow(props, "voice", enum=voices)
        _narrow(props, "format", enum=list(FORMATS))
        _narrow(props, "sample_rate", enum=list(SAMPLE_RATES))
        _narrow(props, "text", maxLength=settings.max_line_chars, pattern=SPOKEN)
    schemas["BatchCreate"]["properties"]["items"]["maxItems"] = settings.api_max_batch_items
    speech = schemas["SpeechCreate"]["properties"]
    _narrow(speech, "response_format", enum=list(SPEECH_FORMATS))
    _narrow(speech, "voice", enum=voices + (sorted(OPENAI_VOICES) if settings.api_map_openai_voices else []))
    _narrow(speech, "input", maxLength=settings.max_line_chars, pattern=SPOKEN)
    fields = schemas[form]["properties"]
    for name, prop in fields.items():  # a form has no null: an optional field is left out
        if "anyOf" in prop:
            fields[name] = {**next(s for s in prop.pop("anyOf") if s.get("type") != "null"), **prop}
    for name in (*_ITEMS, form, "SpeechCreate"):
        for prop in schemas[name]["properties"].values():
            for s in prop.get("anyOf", [prop]):
                if s.get("type") == "string" and not {"pattern", "enum", "const", "contentMediaType"} & s.keys():
                    s["pattern"] = NO_NUL


def _document_limits(schemas: dict, settings: Settings, *, form: str) -> None:
    """A document upload's voice and rate as a batch upload's; its format is the assembled one's."""
    props = schemas[form]["properties"]
    _narrow(props, "voice", enum=list(engine_voices(settings.engine_settings())))
    _narrow(props, "sample_rate", enum=list(SAMPLE_RATES))
    for name, prop in props.items():  # a form has no null: an optional field is left out
        if "anyOf" in prop:
            props[name] = prop = {**next(s for s in prop.pop("anyOf") if s.get("type") != "null"), **prop}
        if (
            prop.get("type") == "string"
            and not {"pattern", "enum", "const", "contentMediaType", "format"} & prop.keys()
        ):
            prop["pattern"] = NO_NUL
    schemas[form].setdefault("allOf", []).append(_events_need_a_url())


def _dependent_fields(schemas: dict, *, form: str) -> None:
    """Events without an address are a 422: stated here, so a client, or a fuzzer, knows it
    before sending."""
    for name in ("BatchCreate", "JobCreate", form):
        schemas[name].setdefault("allOf", []).append(_events_need_a_url())


def _events_need_a_url() -> dict:
    """webhook_events only with webhook_url (api.schemas.EVENTS_WITHOUT_URL)."""
    given = {"not": {"type": "null"}}
    return {
        "anyOf": [
            {"not": {"required": ["webhook_events"], "properties": {"webhook_events": given}}},
            {"required": ["webhook_url"], "properties": {"webhook_url": given}},
        ]
    }


def _narrow(props: dict, name: str, **constraints) -> None:
    prop = props.get(name)
    if prop is None:
        return
    for s in prop.get("anyOf", [prop]):
        if s.get("type") in ("string", "integer"):
            s.update(constraints)
            if "enum" in constraints:
                s.pop("maxLength", None)
