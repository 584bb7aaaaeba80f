"""Realtime work never waits behind batch work, the API holds many live streams, and a worker that
dies mid-stream cuts its listeners' streams: `synth worker` subprocesses with Piper, the API on a
loopback port, real Redis and both databases."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest
from sqlalchemy import select

from pipeline.db.models import Job, JobStatus
from tests.api.conftest import client_for, serve
from tests.cli_helpers import start_synth, synth, synth_env
from tests.waiting import eventually

LONG = "The committee reviewed every proposal carefully before the final vote was taken. " * 5
SPEECH = "/v1/audio/speech"


def jobs_of(sessions, batch_id: str) -> list[Job]:
    with sessions() as s:
        return s.scalars(select(Job).where(Job.batch_id == batch_id).order_by(Job.line_no)).all()


@pytest.fixture
def worker_env(tmp_path, redis_url, database_url):
    """A user's worker on the test services: one batch slot of one job, one Piper thread."""
    return synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_JOBS_PER_TASK="1",
        SYNTH_ENGINE_THREADS="1",
        SYNTH_WORKER_CONCURRENCY="1",
    )


@pytest.fixture
def worker(worker_env, tmp_path):
    process = start_synth("worker", env=worker_env, log=tmp_path / "worker.log")
    yield process
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except Exception:  # noqa: BLE001 - a worker that will not stop is killed
            process.kill()


def submit(env, path, *extra: str) -> str:
    done = synth("submit", str(path), "--no-wait", *extra, env=env, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


def test_a_realtime_job_starts_before_batch_work_queued_ahead_of_it_while_every_slot_is_busy(
    tmp_path, worker_env, worker, sessions
):
    corpus = tmp_path / "batch.txt"
    # Each line its own (the same line twice is rendered once and reused, and the batch would end
    # with its first render), and a margin for a slow `synth submit` of the realtime line.
    corpus.write_text("".join(f"Part {n}. {LONG}\n" for n in range(30)))
    batch_id = submit(worker_env, corpus)
    eventually(
        lambda: any(j.status == JobStatus.RUNNING for j in jobs_of(sessions, batch_id)),
        120,
        "the only batch slot to be busy",
    )

    line = tmp_path / "realtime.txt"
    line.write_text("Realtime goes first.\n")
    realtime_id = submit(worker_env, line, "--priority", "realtime")
    submitted = time.monotonic()
    (job,) = eventually(
        lambda: [j for j in jobs_of(sessions, realtime_id) if j.status.terminal], 120, "the realtime job to finish"
    )
    waited = time.monotonic() - submitted

    assert job.status == JobStatus.DONE, job.error
    batch = jobs_of(sessions, batch_id)
    queued_before = [j for j in batch if j.status == JobStatus.QUEUED]
    # The batch slot still holds its message and the rest of the batch is still queued: the
    # realtime job went past them, not through a freed slot.
    assert len(queued_before) >= 3, [j.status for j in batch]
    assert waited < 60


@pytest.fixture
def api_settings(settings):
    return settings.with_overrides(api_rate_limit=0, api_max_live_streams=12)


async def _speak(base: str, key: str, text: str) -> tuple[int, dict, bytes]:
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120) as c:
        async with c.stream(
            "POST", SPEECH, json={"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm"}
        ) as r:
            body = b"".join([chunk async for chunk in r.aiter_bytes()])
            return r.status_code, dict(r.headers), body


def test_the_api_under_more_live_streams_than_it_serves_answers_503_with_retry_after_and_never_500(
    api_settings, redis_url, worker, new_key
):
    key = new_key("load")
    with serve(api_settings, redis_url) as server:

        async def burst():
            return await asyncio.gather(*[_speak(server.url, key, f"Stream number {i} says hello.") for i in range(30)])

        results = asyncio.run(burst())
        hub = server.server.config.app.state.synth.live
        eventually(lambda: hub.streams == 0, 10, "every listener to be closed")

    statuses = [status for status, _, _ in results]
    assert 500 not in statuses and set(statuses) <= {200, 503}, statuses
    assert 503 in statuses  # 30 at once against room for 12: the capacity answer was exercised
    served = [body for status, _, body in results if status == 200]
    assert len(served) >= api_settings.api_max_live_streams // 2
    assert all(len(body) > 24_000 for body in served)  # at least half a second of 24 kHz PCM16
    for status, headers, _ in results:
        if status == 503:
            assert int(headers["retry-after"]) >= 1


def test_a_client_that_goes_away_frees_its_live_stream_at_once(api_settings, redis_url, worker, new_key):
    with serve(api_settings, redis_url) as server, client_for(server, new_key("gone")) as client:
        hub = server.server.config.app.state.synth.live
        # Long enough to be far from its end when the client leaves, on a busy machine too.
        with client.stream(
            "POST", SPEECH, json={"model": "tts-1", "input": LONG * 3, "voice": "alloy", "response_format": "pcm"}
        ) as r:
            assert r.status_code == 200
            # The iterator is held: dropped after its first chunk, it would close the connection
            # (httpx closes a response whose reading generator is closed), and the API could free
            # the stream before the check below.
            chunks = r.iter_bytes()
            next(chunks)
            assert hub.streams == 1
        eventually(lambda: hub.streams == 0, 15, "the listener to be closed after the client left")


@pytest.mark.slow
def test_a_worker_killed_mid_stream_cuts_the_clients_stream_within_seconds(api_settings, redis_url, worker, new_key):
    with serve(api_settings, redis_url) as server, client_for(server, new_key("crash")) as client:
        with client.stream(
            "POST", SPEECH, json={"model": "tts-1", "input": LONG * 3, "voice": "alloy", "response_format": "pcm"}
        ) as r:
            assert r.status_code == 200
            chunks = r.iter_bytes()
            received = len(next(chunks))
            os.killpg(worker.pid, signal.SIGKILL)
            killed = time.monotonic()
            with pytest.raises(httpx.RemoteProtocolError):  # cut off: an incomplete transfer
                for chunk in chunks:
                    received += len(chunk)
            cut_after = time.monotonic() - killed
    assert received > 0
    assert cut_after < 20, f"the stream hung {cut_after:.1f} s after its worker died"


def test_the_apis_start_up_warms_the_create_path_without_writing_or_sending_anything(
    api_settings, redis_url, database_url
):
    import redis as redis_lib
    from sqlalchemy import func

    from pipeline.db.models import Batch
    from pipeline.db.session import make_engine, make_sessionmaker
    from pipeline.live import redis_client_url
    from pipeline.routing import REALTIME_QUEUE

    with serve(api_settings, redis_url) as server:
        assert httpx.get(f"{server.url}/healthz").status_code == 200
    with make_sessionmaker(make_engine(database_url))() as s:
        assert s.scalar(select(func.count()).select_from(Batch)) == 0
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert redis_lib.Redis.from_url(redis_client_url(redis_url)).llen(REALTIME_QUEUE) == 0


@pytest.mark.slow
def test_a_stream_published_by_an_engine_in_its_own_process_carries_the_whole_job(
    api_settings, redis_url, worker_env, tmp_path, new_key, sessions
):
    from pipeline.db.models import JobMetrics

    process = start_synth("worker", env={**worker_env, "SYNTH_ENGINE_PROCESS": "separate"}, log=tmp_path / "worker.log")
    try:
        with serve(api_settings, redis_url) as server, client_for(server, new_key("own")) as client:
            with client.stream(
                "POST", SPEECH, json={"model": "tts-1", "input": LONG, "voice": "alloy", "response_format": "pcm"}
            ) as r:
                assert r.status_code == 200
                job_id = r.headers["x-job-id"]
                body = b"".join(r.iter_bytes())
        job = eventually(
            lambda: (j := _job(sessions, job_id)) is not None and j.status.terminal and j, 60, "the job to be recorded"
        )
        assert job.status == JobStatus.DONE
        with sessions() as s:
            stored_s = s.get(JobMetrics, job_id).audio_s
        streamed_s = len(body) / (2 * 24_000)  # the API's pcm: 24 kHz PCM16
        assert stored_s > 5 and abs(streamed_s - stored_s) < 0.02 * stored_s
    finally:
        process.terminate()
        process.wait(timeout=60)


def _job(sessions, job_id: str) -> Job | None:
    with sessions() as s:
        return s.get(Job, job_id)


def test_a_key_at_its_share_of_live_streams_gets_429_while_another_key_still_streams(
    api_settings, redis_url, worker, new_key
):
    settings = api_settings.with_overrides(api_max_live_streams_per_key=1)
    greedy, other = new_key("greedy"), new_key("other")
    with serve(settings, redis_url) as server, client_for(server, greedy) as first:
        hub = server.server.config.app.state.synth.live
        with first.stream(
            "POST", SPEECH, json={"model": "tts-1", "input": LONG * 3, "voice": "alloy", "response_format": "pcm"}
        ) as held:
            assert held.status_code == 200
            chunks = held.iter_bytes()
            next(chunks)  # the greedy key's one stream is open and playing
            with client_for(server, greedy) as again:
                refused = again.post(SPEECH, json={"model": "tts-1", "input": "One more.", "voice": "alloy"})
            assert hub.streams == 1  # refused while its first stream was open
            with client_for(server, other) as client:
                served = client.post(
                    SPEECH, json={"model": "tts-1", "input": "My turn.", "voice": "alloy", "response_format": "pcm"}
                )
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["retry-after"]) >= 1
    assert "SYNTH_API_MAX_LIVE_STREAMS_PER_KEY" in refused.json()["error"]["message"]
    assert served.status_code == 200 and len(served.content) > 10_000
