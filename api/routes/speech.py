"""POST /v1/audio/speech, compatible with OpenAI's speech API: existing clients point their base URL
at synth and keep working. The text becomes a realtime job (realtime queue); the response streams
the job's live audio as the worker produces it."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Request
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import Session as OrmSession
from starlette.concurrency import run_in_threadpool

from api import creating, idempotency
from api.deps import CurrentKey, KeyFirstRoute, State
from api.livehub import LiveCapacityError
from api.routes.jobs import job_finished, open_live_or_fail, owner_limit
from api.schemas import SpeechCreate
from api.streaming import CONTENT_TYPES, OPENAI_PCM_RATE, SPEECH_FORMATS, encode, once, wav_pcm
from api.whole_audio import whole
from pipeline import usage
from pipeline.db.jobs import PlannedBatch, insert_batch
from pipeline.db.models import Batch, Job
from pipeline.db.models_api import ApiKey
from pipeline.engines.registry import engine_voices
from pipeline.lexicon import store as lexicons
from pipeline.lexicon.store import Pin
from pipeline.settings import Settings
from pipeline.submit import BatchOptions, Item, plan_item_batch

router = APIRouter(prefix="/v1/audio", tags=["openai"], route_class=KeyFirstRoute)

# OpenAI's voice names. With api_map_openai_voices they speak with synth's default voice.
OPENAI_VOICES = frozenset(
    {"alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova", "onyx", "sage", "shimmer", "verse"}
)

# A speech job that failed has failed for good (its worker already retried what could pass): 400,
# OpenAI's own status for a request it cannot serve as sent, which its clients do not retry, where
# a 409 has them render the same text twice more.
FAILED = 400


class OpenAIError(HTTPException):
    """An error that names the request field at fault (``error.param`` of OpenAI's error object,
    which api/errors.py adds on these routes beside our usual ``detail``)."""

    def __init__(self, status: int, message: str, param: str) -> None:
        super().__init__(status, detail=message)
        self.param = param


def pick_voice(settings: Settings, voice: str) -> str | None:
    """The engine voice to use (None: the default), or an OpenAIError listing the choices."""
    voices = engine_voices(settings.engine_settings())
    if voice in voices:
        return voice
    if settings.api_map_openai_voices and voice in OPENAI_VOICES:
        return None
    extra = " (or an OpenAI voice name, spoken by the default voice)" if settings.api_map_openai_voices else ""
    raise OpenAIError(400, f"unknown voice {voice!r}; choose one of {', '.join(voices)}{extra}", "voice")


@router.post(
    "/speech",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {t: {} for t in sorted(set(CONTENT_TYPES.values()))},
            "description": "audio, streamed as it is synthesized",
        },
        404: {"description": "no such lexicon (X-Synth-Lexicon) for this key"},
        FAILED: {"description": "unknown voice or format, or a text its job could not render (nothing speakable ...)"},
        429: {"description": "this key holds its share of live streams (Retry-After)"},
        503: {"description": "the API serves as many live streams as it may (Retry-After)"},
    },
)
async def speech(
    body: SpeechCreate,
    key: CurrentKey,
    state: State,
    request: Request,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    lexicon: Annotated[
        str | None,
        Header(
            alias="X-Synth-Lexicon",
            max_length=100,
            description="A lexicon of yours (name or id) to read the input with; `none` for no "
            "lexicon; default: your lexicon named `default`, if any",
        ),
    ] = None,
) -> Response:
    """Streamed as the job renders; when its audio is already complete (an Idempotency-Key replay),
    or the client reads the body whole before using it, it is answered whole, a WAV with its real
    sizes."""
    job_id = await _new_job(state, key, body, lexicon, idempotency_key)
    headers = {"X-Job-Id": job_id, "Cache-Control": "no-store"}
    live = await open_live_or_fail(state, job_id, FAILED, owner=key)
    if live is None:  # a replay after the live copy expired: the stored WAV
        rate, pcm = wav_pcm(await run_in_threadpool(_stored_wav, state, job_id))
        return await whole(
            once(pcm),
            rate,
            body.response_format,
            job_id=job_id,
            speed=body.speed,
            pcm_rate=OPENAI_PCM_RATE,
            headers=headers,
        )
    # pcm has no header to size, and a stream's first bytes must not wait for a database read
    if (body.response_format == "wav" and reads_whole(request)) or (
        body.response_format != "pcm" and await run_in_threadpool(job_finished, state, job_id)
    ):
        return await whole(
            live.pcm,
            live.sample_rate,
            body.response_format,
            job_id=job_id,
            speed=body.speed,
            pcm_rate=OPENAI_PCM_RATE,
            headers=headers,
            failed_status=FAILED,
        )
    return StreamingResponse(
        encode(live.pcm, live.sample_rate, body.response_format, body.speed, OPENAI_PCM_RATE),
        media_type=CONTENT_TYPES[body.response_format],
        headers=headers,
    )


async def _new_job(state, key: ApiKey, body: SpeechCreate, lexicon: str | None, idempotency_key: str | None) -> str:
    """The request's job, once its format, the live streams' limits, its lexicon and the key's
    quota allow it; a replay's existing job for a known Idempotency-Key."""
    if body.response_format not in SPEECH_FORMATS:
        raise OpenAIError(
            400,
            f"unsupported response_format {body.response_format!r}; choose one of {', '.join(SPEECH_FORMATS)}",
            "response_format",
        )
    voice = pick_voice(state.settings, body.voice)
    if not state.live.has_room():  # refused before a job is made that nobody would hear
        raise LiveCapacityError(f"this API process serves {state.live.max_streams} live streams already")
    if not state.live.owner_has_room(key.id, key.live_streams):
        raise owner_limit(state, key)
    pin = await run_in_threadpool(_lexicon, state, key, lexicon)
    if idempotency_key is None:
        if usage.has_daily_quota(key):  # a read only for a key with a quota: the first byte waits on it
            await run_in_threadpool(_check_quota, state, key, len(body.input))
        assert state.create_speech is not None  # set as the app starts (api/app.py)
        job_id = await state.create_speech(partial(_plan, state, key, body, voice, pin))
    else:  # a replay may answer with an existing job: the request's own transaction
        job_id = await run_in_threadpool(_create, state, key, body, voice, pin, idempotency_key)
    return job_id


def reads_whole(request: Request) -> bool:
    """Whether the client reads the whole body before using it, so a WAV is worth waiting for to
    carry its real sizes (a streamed one says "unknown", which Python's ``wave`` reads as a day of audio).
    OpenAI's Python SDK says so: its ``create()`` reads the body whole, and a streamed read
    (``with_streaming_response``) marks its request ``X-Stainless-Raw-Response: stream``. Other
    clients, which may play the audio as it arrives, get it streamed."""
    return (
        request.headers.get("x-stainless-lang") == "python"
        and request.headers.get("x-stainless-raw-response") != "stream"
    )


def _lexicon(state, key: ApiKey, ref: str | None) -> Pin | None:
    """The header's lexicon (404 for none of this key's), or the key's default."""
    if ref == "none":
        return None
    with state.sessions() as session:
        return lexicons.pin(session, owner=key.id, ref=ref)


def _plan(
    state, key: ApiKey, body: SpeechCreate, voice: str | None, pin: Pin | None, *, queued: bool = True
) -> PlannedBatch:
    """The speech request's batch of one job, validated (InputError), not yet written."""
    options = BatchOptions(voice=voice, format="wav", priority="realtime", lexicon=pin)  # stored copy: WAV
    return plan_item_batch(
        state.settings,
        [Item(text=body.input, client_id="speech")],
        options,
        source="api:speech",
        queued=queued,
        **creating.owner_columns(state, key, kind="job"),
    )


def _build(state, key: ApiKey, body: SpeechCreate, voice: str | None, pin: Pin | None, session: OrmSession) -> Batch:
    return insert_batch(session, _plan(state, key, body, voice, pin, queued=False))


def _create(state, key: ApiKey, body: SpeechCreate, voice: str | None, pin: Pin | None, idempotency_key: str) -> str:
    claim = idempotency.make_claim(key.id, idempotency_key, "POST /v1/audio/speech", body.model_dump_json().encode())
    with state.sessions() as session:
        job_id, _ = creating.create(
            state, session, claim, "job", partial(_build, state, key, body, voice, pin), key=key, chars=len(body.input)
        )
    return job_id


def _check_quota(state, key: ApiKey, chars: int) -> None:
    with state.sessions() as session:
        usage.check_submission(session, key, chars)


def _stored_wav(state, job_id: str) -> bytes:
    with state.sessions() as session:
        job = session.get(Job, job_id)
        if job is None or job.object_key is None or job.format != "wav":
            raise HTTPException(FAILED, detail=f"job {job_id} produced no audio: {job.error if job else 'deleted'}")
        return state.store.get(job.object_key)
