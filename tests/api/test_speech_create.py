"""Speech requests that arrive together are created together (api/creating.py SpeechCreator):
each still gets a job of its own with its own audio, and a request whose text is refused fails
alone, with its reason, while the others in its group go on. The real API, a Celery worker with
Piper, real Redis and both databases."""

from __future__ import annotations

import asyncio
import io
import wave

import httpx
import pytest
from sqlalchemy import select

from pipeline.db.models import Batch, Job, JobStatus
from pipeline.db.session import make_engine, make_sessionmaker
from tests.waiting import eventually

SPEECH = "/v1/audio/speech"
BAD = "\u200b \u00a0"  # valid JSON and schema, nothing to say: refused when the job is made


async def _speak(server_url: str, key: str, texts: list[str]) -> list[httpx.Response]:
    async with httpx.AsyncClient(
        base_url=server_url, headers={"Authorization": f"Bearer {key}"}, timeout=300
    ) as client:

        async def one(text: str) -> httpx.Response:
            return await client.post(
                SPEECH, json={"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
            )

        return await asyncio.gather(*[one(t) for t in texts])


def test_speech_requests_sent_together_each_get_their_own_job_and_a_bad_one_fails_alone(
    api_server, running_worker, new_key, database_url
):
    texts = [f"Request number {i}." for i in range(12)]
    texts[3] = texts[8] = BAD
    responses = asyncio.run(_speak(api_server.url, new_key("together"), texts))

    good = [r for t, r in zip(texts, responses) if t != BAD]
    bad = [r for t, r in zip(texts, responses) if t == BAD]
    assert [r.status_code for r in good] == [200] * 10, [r.text[:200] for r in good]
    assert all(len(r.content) > 4800 for r in good)  # at least 0.1 s of 24 kHz PCM16 each
    assert [r.status_code for r in bad] == [400, 400]
    assert all("empty" in r.json()["detail"] for r in bad), [r.text for r in bad]
    job_ids = [r.headers["X-Job-Id"] for r in good]
    assert len(set(job_ids)) == 10

    sessions = make_sessionmaker(make_engine(database_url))

    def all_done() -> bool:
        # A stream ends with its last chunk; the job's record follows once its file is stored.
        with sessions() as s:
            return set(s.scalars(select(Job.status).where(Job.id.in_(job_ids)))) == {JobStatus.DONE}

    eventually(all_done, 30, "the streamed jobs' records to say done")
    with sessions() as s:
        jobs = s.scalars(select(Job).where(Job.id.in_(job_ids))).all()
        assert sorted(j.text for j in jobs) == sorted(t for t in texts if t != BAD)
        batches = s.scalars(select(Batch).where(Batch.id.in_([j.batch_id for j in jobs]))).all()
        assert len(batches) == 10 and all(b.total_jobs == 1 and b.finished_at is not None for b in batches)
        # nothing was written for the refused requests
        assert s.scalar(select(Job.id).where(Job.text == BAD.strip())) is None


def test_a_wav_the_openai_client_reads_whole_carries_its_real_sizes(api_server, running_worker, new_key):
    """create() reads the body whole: the WAV waits for its last sample and says how long it is,
    where a streamed one (with_streaming_response) keeps the header that says "unknown"."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{api_server.url}/v1", api_key=new_key("whole"), max_retries=0)
    text = "A whole file, read by a program that trusts its header."
    wav = client.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format="wav", speed=1)
    assert wav.response.headers["content-length"] == str(len(wav.content))
    with wave.open(io.BytesIO(wav.content)) as w:
        seconds = w.getnframes() / w.getframerate()
        frames = w.readframes(w.getnframes())
    assert w.getnframes() * 2 == len(frames) == len(wav.content) - 44  # every sample, and no more
    assert 1.0 < seconds < 10.0, seconds  # a sentence, not the 0xFFFFFFFF-byte day a stream's header says

    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=text, response_format="wav"
    ) as streamed:
        data = b"".join(streamed.iter_bytes())
    assert data[4:8] == data[40:44] == b"\xff\xff\xff\xff"
