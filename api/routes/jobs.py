"""Single jobs: create, get, cancel, audio (presigned redirect or bytes), live stream."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, HTTPException
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from api import creating, idempotency
from api.deps import CurrentKey, KeyFirstRoute, Responses, Session, State
from api.ids import could_exist
from api.livehub import OwnerLimitError
from api.schemas import JobCreate, JobOut
from api.streaming import CONTENT_TYPES, KeyRevokedError, LiveStartTimeout, LiveStreamError, encode, open_live
from api.views import job_out
from api.whole_audio import stored_pcm, whole
from pipeline import lifecycle
from pipeline.formats import get_format
from pipeline.db import owned
from pipeline.db.models import Job, JobMetrics, JobStatus
from pipeline.db.models_api import ApiKey
from pipeline.lexicon import store as lexicons
from pipeline.submit import BatchOptions, Item, create_item_batch
from pipeline.verify.jobs import CAPTION_TYPES, caption_key

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=KeyFirstRoute)
NOT_FOUND: Responses = {404: {"description": "no such job for this key"}}


def own_job(session, key: ApiKey, job_id: str) -> Job:
    job = owned.get_job(session, owner=key.id, job_id=job_id) if could_exist(job_id) else None
    if job is None:
        raise HTTPException(404, detail=f"job {job_id} not found")
    return job


def job_body(session, job_id: str) -> dict:
    job = session.get(Job, job_id)
    session.refresh(job)
    return job_out(job, owned.job_metrics(session, job.id)).model_dump(mode="json")


@router.post(
    "",
    status_code=201,
    response_model=JobOut,
    responses={409: {"description": "Idempotency-Key reused"}, 404: {"description": "no such lexicon for this key"}},
)
def create_job(
    body: JobCreate,
    key: CurrentKey,
    state: State,
    session: Session,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> JSONResponse:
    """One text. priority=realtime goes ahead of batch work and streams live (GET .../stream)."""
    claim = idempotency.make_claim(key.id, idempotency_key, "POST /v1/jobs", body.fingerprinted())
    item = Item(text=body.text, client_id=body.client_id or "job")
    options = BatchOptions(
        voice=body.voice,
        format=body.format,
        sample_rate=body.sample_rate,
        priority=body.priority,
        loudness=body.loudness_target,
        true_peak=body.true_peak_max,
        lexicon=lexicons.pin(session, owner=key.id, ref=body.lexicon, version=body.lexicon_version),
    )
    columns = creating.owner_columns(
        state, key, kind="job", webhook_url=body.webhook_url, webhook_events=body.webhook_events
    )
    job_id, created = creating.create(
        state,
        session,
        claim,
        "job",
        lambda s: create_item_batch(s, state.settings, [item], options, source="api", **columns),
        key=key,
        chars=len(item.text),
    )
    return JSONResponse(
        job_body(session, job_id), status_code=201, headers={"Idempotent-Replayed": "false" if created else "true"}
    )


@router.get("/{job_id}", response_model=JobOut, responses=NOT_FOUND)
def get_job(job_id: str, key: CurrentKey, session: Session) -> JobOut:
    job = own_job(session, key, job_id)
    return job_out(job, owned.job_metrics(session, job.id))


@router.post("/{job_id}/cancel", response_model=JobOut, responses=NOT_FOUND)
def cancel_job(job_id: str, key: CurrentKey, session: Session, state: State) -> JSONResponse:
    """Cancels a pending or queued job; a running or finished one is left as it is (see status)."""
    job = own_job(session, key, job_id)
    lifecycle.cancel(session, state.store, job.batch_id, [job.id])
    session.commit()
    return JSONResponse(job_body(session, job.id))


@router.get(
    "/{job_id}/audio",
    responses={**NOT_FOUND, 307: {"description": "to a presigned URL"}, 409: {"description": "not done yet"}},
)
def get_audio(job_id: str, key: CurrentKey, session: Session, state: State, redirect: bool = True) -> Response:
    """The finished audio: a 307 to a short-lived presigned URL on S3, else (or with
    redirect=false) the bytes."""
    job = own_job(session, key, job_id)
    if job.status != JobStatus.DONE or not job.object_key:
        raise HTTPException(409, detail=f"job {job.id} is {job.status.value}; audio exists once it is done")
    if redirect:
        url = state.store.presigned_url(job.object_key, state.settings.presign_seconds)
        if url:
            return RedirectResponse(url, status_code=307)
    return Response(state.store.get(job.object_key), media_type=get_format(job.format).content_type)


@router.get("/{job_id}/captions", responses={**NOT_FOUND, 409: {"description": "no word times for this job"}})
def get_captions(
    job_id: str, key: CurrentKey, session: Session, state: State, format: Literal["srt", "vtt", "json"] = "srt"
) -> Response:
    """The job's word times, from the check of its audio against its text: SubRip, WebVTT, or
    JSON (word, start, end, confidence)."""
    job = own_job(session, key, job_id)
    metrics = session.get(JobMetrics, job.id)
    found = ((metrics.extra or {}).get("verify") or {}) if metrics is not None else {}
    if metrics is not None and metrics.verdict == "pending":
        raise HTTPException(
            409,
            detail=f"job {job.id} waits for its check on the verify queue (synth worker "
            "--verify); its word times come with it",
        )
    if job.status != JobStatus.DONE or not job.object_key or not found.get("captions"):
        raise HTTPException(
            409,
            detail=f"job {job.id} has no word times: they come with a check of a done "
            "job's audio against its text (SYNTH_VERIFY)",
        )
    data = state.store.get(caption_key(job.object_key, format))
    return Response(data, media_type=CAPTION_TYPES[format] + ("; charset=utf-8" if format != "json" else ""))


@router.get("/{job_id}/stream", responses={**NOT_FOUND, 409: {"description": "a batch job still queued"}})
async def stream_job(job_id: str, key: CurrentKey, state: State, format: Literal["wav", "pcm"] = "wav") -> Response:
    """Live audio while a realtime job renders (WAV with an open-ended header, or raw PCM16 with
    X-Sample-Rate); a late joiner gets it from the start. A finished job is answered whole: WAV with
    its real sizes or PCM from its live copy, else (expired, or a batch job) its stored file, or
    that file's PCM with format=pcm."""
    job = await run_in_threadpool(_load, state, key, job_id)
    if job.priority != "realtime" and not job.status.terminal:
        raise HTTPException(
            409,
            detail=f"job {job.id} is a batch job ({job.status.value}); live audio is "
            f"for realtime jobs; its file is at /v1/jobs/{job.id}/audio once done",
        )
    live = await open_live_or_fail(state, job.id, owner=key)
    if live is None:
        return await run_in_threadpool(stored_audio, state, job.id, format == "pcm")
    headers = {"X-Sample-Rate": str(live.sample_rate), "Cache-Control": "no-store"}
    if await run_in_threadpool(job_finished, state, job.id):
        return await whole(live.pcm, live.sample_rate, format, job_id=job.id, headers=headers)
    return StreamingResponse(
        encode(live.pcm, live.sample_rate, format), media_type=CONTENT_TYPES[format], headers=headers
    )


def _load(state, key: ApiKey, job_id: str) -> Job:
    with state.sessions() as session:
        return own_job(session, key, job_id)


async def open_live_or_fail(state, job_id: str, failed_status: int = 409, *, owner: ApiKey):
    """The job's live stream; None if it finished without one; HTTP ``failed_status`` if it failed,
    503 if no worker started it in time, 429 if ``owner`` (the API key) holds its share of streams."""

    async def finished() -> bool:
        return await run_in_threadpool(job_finished, state, job_id)

    try:
        return await open_live(
            state.live, state.aredis, job_id, finished, state.settings.live_start_timeout, owner.id, owner.live_streams
        )
    except OwnerLimitError as e:
        raise owner_limit(state, owner) from e
    except KeyRevokedError as e:
        raise HTTPException(401, detail=f"{e}", headers={"WWW-Authenticate": "Bearer"}) from e
    except LiveStartTimeout as e:
        raise HTTPException(503, detail=str(e), headers={"Retry-After": "10"}) from e
    except LiveStreamError as e:
        raise HTTPException(failed_status, detail=f"job {job_id} produced no audio: {e}") from e


def owner_limit(state, key: ApiKey) -> HTTPException:
    """429 for a key at its share of live streams: its own streams free it as they end."""
    limit = state.live.owner_limit(key.live_streams)
    source = (
        "its quota, `synth keys quota --live-streams`"
        if limit != state.live.max_per_owner
        else "SYNTH_API_MAX_LIVE_STREAMS_PER_KEY"
    )
    if limit == 0:  # no stream will end to make room: "try again" would have a client retry forever
        return HTTPException(
            429, detail=f"this API key may open no live streams ({source} is 0)", headers={"Retry-After": "1"}
        )
    return HTTPException(
        429,
        detail=f"this API key has {limit} live streams open already ({source}); try again when one ends",
        headers={"Retry-After": "1"},
    )


def job_finished(state, job_id: str) -> bool:
    with state.sessions() as session:
        job = session.get(Job, job_id)
        return job is None or job.status.terminal


def stored_audio(state, job_id: str, as_pcm: bool = False) -> Response:
    """The finished job's file, or (``as_pcm``) its PCM16 with X-Sample-Rate; 409 if it has none."""
    with state.sessions() as session:
        job = session.get(Job, job_id)
    if job is None or job.status != JobStatus.DONE or not job.object_key:
        reason = job.error if job is not None and job.error else (job.status.value if job else "deleted")
        raise HTTPException(409, detail=f"job {job_id} produced no audio: {reason}")
    data = state.store.get(job.object_key)
    if not as_pcm:
        return Response(data, media_type=get_format(job.format).content_type)
    rate, pcm = stored_pcm(data, job.format)
    return Response(pcm, media_type=CONTENT_TYPES["pcm"], headers={"X-Sample-Rate": str(rate)})
