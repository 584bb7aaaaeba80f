"""Jobs through the whole path: the API on a loopback port, Redis, a real Celery worker with Piper,
SQLite and PostgreSQL, a local folder and S3 over HTTP."""

from __future__ import annotations

import time
import wave
import io
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import func, select

from pipeline.db.models import Job
from pipeline.db.session import make_engine, make_sessionmaker
from tests.api.conftest import wait_batch, wait_job
from tests.speech import to_pcm16k, transcribe, wav_bytes, word_error_rate

SENTENCES = " ".join(f"This is sentence number {i} of a longer text read aloud." for i in range(40))


@pytest.fixture(params=["local", "s3"])
def api_settings(request, settings):
    settings = settings.with_overrides(api_rate_limit=0)  # the tests poll
    if request.param == "local":
        return settings
    return settings.with_overrides(
        s3_bucket=request.getfixturevalue("s3_bucket"), s3_endpoint_url=request.getfixturevalue("s3_endpoint")
    )


def test_job_renders_and_its_audio_downloads(api_settings, client, running_worker):
    r = client.post("/v1/jobs", json={"text": "The quick brown fox jumps over the lazy dog.", "format": "wav"})
    assert r.status_code == 201, r.text
    job = wait_job(client, r.json()["id"])
    assert job["status"] == "done" and job["audio_seconds"] > 1 and job["audio_url"]

    direct = client.get(f"/v1/jobs/{job['id']}/audio", params={"redirect": "false"})
    assert direct.status_code == 200 and direct.headers["content-type"] == "audio/wav"
    assert direct.content[:4] == b"RIFF"
    assert word_error_rate("the quick brown fox jumps over the lazy dog", transcribe(direct.content)) <= 0.4

    first = client.get(f"/v1/jobs/{job['id']}/audio")
    if api_settings.s3_bucket:  # a presigned URL that expires, served by S3 itself
        assert first.status_code == 307
        url = first.headers["location"]
        query = parse_qs(urlsplit(url).query)
        if "X-Amz-Expires" in query:  # SigV4
            assert query["X-Amz-Expires"] == ["900"] and query["X-Amz-Signature"]
        else:  # SigV2: an absolute expiry time
            assert 800 < int(query["Expires"][0]) - time.time() <= 900 and query["Signature"]
        assert httpx.get(url).content == direct.content
    else:
        assert first.status_code == 200 and first.content == direct.content


def test_batch_renders_with_per_item_overrides(client, running_worker):
    r = client.post(
        "/v1/batches",
        json={
            "name": "two",
            "format": "mp3",
            "items": [
                {"client_id": "a", "text": "Good morning."},
                {"client_id": "b", "text": "Good night.", "format": "flac", "sample_rate": 16000},
                {"client_id": "c", "text": "--- ..."},
            ],
        },
    )
    assert r.status_code == 201, r.text
    batch = wait_batch(client, r.json()["id"])
    assert batch["counts"]["done"] == 2 and batch["counts"]["failed"] == 1 and batch["progress"] == 1.0
    assert batch["billable_characters"] == len("Good morning.") + len("Good night.")
    assert batch["audio_seconds"] > 0.5
    items = {j["client_id"]: j for j in client.get(f"/v1/batches/{batch['id']}/items").json()["data"]}
    assert items["a"]["format"] == "mp3" and items["b"]["format"] == "flac" and items["b"]["sample_rate"] == 16000
    assert "nothing speakable" in items["c"]["error"]
    flac = client.get(f"/v1/jobs/{items['b']['id']}/audio", params={"redirect": "false"})
    assert flac.content[:4] == b"fLaC" and flac.headers["content-type"] == "audio/flac"
    failed = client.get(f"/v1/batches/{batch['id']}/items", params={"state": "failed"}).json()["data"]
    assert [j["client_id"] for j in failed] == ["c"]


def _read_stream(client, job_id: str, fmt: str = "pcm"):
    """(bytes, seconds to the first byte, job status seen right after the first byte)."""
    started = time.monotonic()
    first_at, status_at_first, body = None, None, bytearray()
    with client.stream("GET", f"/v1/jobs/{job_id}/stream", params={"format": fmt}) as r:
        assert r.status_code == 200, r.read()
        rate = int(r.headers["x-sample-rate"])
        for chunk in r.iter_bytes():
            if first_at is None and chunk:
                first_at = time.monotonic() - started
                status_at_first = client.get(f"/v1/jobs/{job_id}").json()["status"]
            body.extend(chunk)
    return bytes(body), rate, first_at, status_at_first


def test_live_stream_arrives_while_rendering_and_late_joiner_gets_it_all(client, running_worker):
    r = client.post("/v1/jobs", json={"text": SENTENCES, "priority": "realtime", "format": "wav"})
    job_id = r.json()["id"]
    live, rate, first_at, status_at_first = _read_stream(client, job_id)
    assert status_at_first in ("queued", "running"), "the first bytes came before the job was done"
    job = wait_job(client, job_id)
    assert job["status"] == "done"

    late, late_rate, _, _ = _read_stream(client, job_id)  # after the end: replayed from the start
    assert late == live and late_rate == rate

    stored = client.get(f"/v1/jobs/{job_id}/audio", params={"redirect": "false"}).content
    with wave.open(io.BytesIO(stored)) as w:
        assert w.getframerate() == rate
        stored_frames = w.readframes(w.getnframes())
    assert live == stored_frames  # same pieces joined with the same crossfades: the same samples

    wav = client.get(f"/v1/jobs/{job_id}/stream").content  # wav: open-ended header + the same PCM
    assert wav[:4] == b"RIFF" and wav[44:] == live


def test_stream_of_a_batch_job_falls_back_to_the_stored_file(client, running_worker):
    job = wait_job(client, client.post("/v1/jobs", json={"text": "Hello there.", "format": "mp3"}).json()["id"])
    r = client.get(f"/v1/jobs/{job['id']}/stream")
    assert r.status_code == 200 and r.headers["content-type"] == "audio/mpeg"
    assert r.content == client.get(f"/v1/jobs/{job['id']}/audio", params={"redirect": "false"}).content


def test_openai_client_streams_speech(api_server, new_key, running_worker):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{api_server.url}/v1", api_key=new_key("openai"), max_retries=0)
    text = "The quick brown fox jumps over the lazy dog."
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=text, response_format="wav"
    ) as response:
        assert response.headers["content-type"] == "audio/wav"
        data = b"".join(response.iter_bytes())
    assert data[:4] == b"RIFF" and len(data) > 20_000
    rate = int.from_bytes(data[24:28], "little")
    assert word_error_rate(text, transcribe(wav_bytes(data[44:], rate))) <= 0.5

    mp3 = client.audio.speech.create(model="tts-1", voice="joe", input=text, response_format="mp3", speed=1.5)
    assert mp3.content[:3] in (b"ID3",) or mp3.content[0] == 0xFF
    wav_seconds = (len(data) - 44) / 2 / rate
    mp3_seconds = len(to_pcm16k(mp3.content)) / 2 / 16000
    assert 0.55 < mp3_seconds / wav_seconds < 0.8  # speed 1.5 through ffmpeg's atempo
    pcm = client.audio.speech.create(model="tts-1", voice="nova", input="Hello.", response_format="pcm")
    assert len(pcm.content) > 24_000 * 2 * 0.3  # 24 kHz int16: more than 0.3 s

    with pytest.raises(openai.BadRequestError, match="choose one of joe") as bad_voice:
        client.audio.speech.create(model="tts-1", voice="zeus", input=text)
    assert bad_voice.value.param == "voice"
    with pytest.raises(openai.BadRequestError, match="unsupported response_format") as bad_format:
        client.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format="ogg")
    assert "mp3, opus, aac, flac, wav, pcm" in bad_format.value.response.json()["detail"]


def test_speech_whose_job_fails_is_refused_once_and_the_openai_client_does_not_send_it_again(
    api_server, new_key, running_worker, database_url
):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{api_server.url}/v1", api_key=new_key("unspeakable"))  # default retries
    with pytest.raises(openai.BadRequestError, match="nothing speakable") as failed:
        client.audio.speech.create(model="tts-1", voice="alloy", input="...!?")
    assert failed.value.response.json()["error"]["type"] == "invalid_request_error"
    engine = make_engine(database_url)
    with make_sessionmaker(engine)() as session:  # one job rendered, not one per retry
        assert session.scalar(select(func.count()).select_from(Job).where(Job.text == "...!?")) == 1
    engine.dispose()
