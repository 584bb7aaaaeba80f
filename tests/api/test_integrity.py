"""One item's audio never serves another's, and deleted audio is served from nowhere: object keys
unique per job, fetched files unique per job, manifests and webhooks without server paths,
Idempotency-Keys of deleted resources, the live copy of a deleted job."""

from __future__ import annotations

import io
import json
import wave

import redis

from cli.inspect import fetch_batch
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.live import stream_key
from pipeline.storage import make_store
from pipeline.storage.base import manifest_key
from tests.api.conftest import wait_batch, wait_job
from tests.speech import transcribe, word_error_rate
from tests.waiting import eventually

TEXTS = {"a/b": "Apple banana cherry.", "a_b": "Seven eight nine ten.", "a b": "Good morning everyone."}


def _stored_manifest(store, batch_id: str, timeout: float = 30) -> list[dict]:
    """The worker writes it just after the last job ends."""
    eventually(lambda: store.exists(manifest_key(batch_id)), timeout, f"the manifest of batch {batch_id}", interval=0.1)
    return [json.loads(line) for line in store.get(manifest_key(batch_id)).decode().splitlines()]


def test_items_whose_ids_read_alike_each_keep_their_own_audio(
    api_settings, client, running_worker, database_url, tmp_path
):
    items = [{"client_id": c, "text": t} for c, t in TEXTS.items()]
    batch_id = client.post("/v1/batches", json={"format": "wav", "items": items}).json()["id"]
    assert wait_batch(client, batch_id)["counts"]["done"] == 3
    jobs = client.get(f"/v1/batches/{batch_id}/items").json()["data"]
    audio = {
        j["client_id"]: client.get(f"/v1/jobs/{j['id']}/audio", params={"redirect": "false"}).content for j in jobs
    }
    assert len(set(audio.values())) == 3
    words = {c: t.lower().rstrip(".") for c, t in TEXTS.items()}
    for client_id in TEXTS:  # each job speaks its own words: nearest to its text, far from the others
        heard = transcribe(audio[client_id])
        errors = {c: word_error_rate(w, heard) for c, w in words.items()}
        assert min(errors, key=errors.get) == client_id and errors[client_id] <= 0.67, (client_id, heard)

    store = make_store(api_settings)
    manifest = _stored_manifest(store, batch_id)
    assert [m["client_id"] for m in manifest] == list(TEXTS)
    assert len({m["object_key"] for m in manifest}) == 3
    by_id = {j["client_id"]: j["id"] for j in jobs}
    assert [m["url"] for m in manifest] == [f"/v1/jobs/{by_id[c]}/audio" for c in TEXTS]  # no file:// path
    assert "file:" not in json.dumps(manifest)

    out = tmp_path / "fetched"
    fetch_batch(api_settings, make_sessionmaker(make_engine(database_url)), batch_id, out)
    fetched = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [m["file"] for m in fetched] == ["a_b.wav", "a_b-2.wav", "a_b-3.wav"]
    assert all((out / m["file"]).read_bytes() == audio[m["client_id"]] for m in fetched)


def test_a_deleted_resources_idempotency_key_answers_410(client):
    cases = [
        ("/v1/batches", {"json": {"items": [{"text": "One."}]}}),
        ("/v1/jobs", {"json": {"text": "One."}}),
        ("/v1/batches/upload", {"files": {"file": ("a.txt", b"One.\n")}}),
    ]
    for path, body in cases:
        created = client.post(path, headers={"Idempotency-Key": f"gone{path}"}, **body).json()
        batch_id = created.get("batch_id", created["id"])
        assert client.delete(f"/v1/batches/{batch_id}").status_code == 200
        again = client.post(path, headers={"Idempotency-Key": f"gone{path}"}, **body)
        assert again.status_code == 410, (path, again.text)
        assert "was deleted; use a new key" in again.json()["detail"]


def test_deleted_speech_is_served_from_nowhere(client, running_worker, redis_url):
    body = {"model": "tts-1", "voice": "alloy", "input": "Hello there.", "response_format": "pcm"}
    first = client.post("/v1/audio/speech", json=body, headers={"Idempotency-Key": "say"})
    assert first.status_code == 200 and len(first.content) > 10_000
    job_id = first.headers["x-job-id"]
    job = wait_job(client, job_id)
    live = redis.Redis.from_url(redis_url.replace("redis+socket://", "unix://"))
    assert live.exists(stream_key(job_id))
    assert client.delete(f"/v1/batches/{job['batch_id']}").status_code == 200
    assert not live.exists(stream_key(job_id))  # the live copy went with the files and rows

    again = client.post("/v1/audio/speech", json=body, headers={"Idempotency-Key": "say"})
    assert again.status_code == 410 and again.content != first.content
    assert "was deleted" in again.json()["error"]["message"]
    assert client.get(f"/v1/jobs/{job_id}/stream").status_code == 404


def test_finished_audio_is_answered_whole_in_the_format_asked(client, running_worker):
    """A finished job's length is known: WAV carries its real sizes (Python's wave reads the true
    frame count), and stream?format=pcm gives PCM even where the stored file is an mp3."""
    body = {"model": "tts-1", "voice": "alloy", "input": "Hello there, how are you?", "response_format": "wav"}
    first = client.post("/v1/audio/speech", json=body, headers={"Idempotency-Key": "wav"})
    wait_job(client, first.headers["x-job-id"])
    replay = client.post("/v1/audio/speech", json=body, headers={"Idempotency-Key": "wav"})
    assert replay.status_code == 200 and replay.headers["content-length"] == str(len(replay.content))
    with wave.open(io.BytesIO(replay.content)) as w:
        assert w.getnframes() == (len(replay.content) - 44) // 2 and 1 < w.getnframes() / w.getframerate() < 5
    assert replay.content[44:] == first.content[44:]

    job = wait_job(client, client.post("/v1/jobs", json={"text": "Hello there.", "format": "mp3"}).json()["id"])
    pcm = client.get(f"/v1/jobs/{job['id']}/stream", params={"format": "pcm"})
    assert pcm.status_code == 200 and pcm.headers["content-type"] == "audio/pcm"
    rate = int(pcm.headers["x-sample-rate"])
    assert pcm.content[:4] != b"RIFF" and 0.5 < len(pcm.content) / 2 / rate < 3
