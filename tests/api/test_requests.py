"""Idempotency, limits, pagination, cancel, delete, upload and expiry, against a real server (no
worker: jobs stay queued unless a test says otherwise)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from pipeline.db.models import Batch, utcnow
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.lifecycle import expire_batches
from pipeline.storage import make_store
from tests.api.conftest import client_for, serve, wait_batch
from tests.waiting import eventually

ITEMS = {"items": [{"text": "One."}, {"text": "Two."}]}


def test_same_idempotency_key_and_body_returns_the_same_batch(client):
    first = client.post("/v1/batches", json=ITEMS, headers={"Idempotency-Key": "k1"})
    again = client.post("/v1/batches", json=ITEMS, headers={"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert first.headers["idempotent-replayed"] == "false" and again.headers["idempotent-replayed"] == "true"
    assert len(client.get("/v1/batches").json()["data"]) == 1

    other = client.post("/v1/batches", json={"items": [{"text": "Three."}]}, headers={"Idempotency-Key": "k1"})
    assert other.status_code == 409 and "different request" in other.json()["detail"]
    assert client.post("/v1/batches", json=ITEMS).json()["id"] != first.json()["id"]  # no key: a new batch


def test_idempotency_keys_are_per_api_key_and_per_resource(api_server, new_key, client):
    job = client.post("/v1/jobs", json={"text": "Hi."}, headers={"Idempotency-Key": "same"})
    assert (
        client.post("/v1/jobs", json={"text": "Hi."}, headers={"Idempotency-Key": "same"}).json()["id"]
        == job.json()["id"]
    )
    other_tenant = client_for(api_server, new_key("b"))
    mine = other_tenant.post("/v1/jobs", json={"text": "Hi."}, headers={"Idempotency-Key": "same"})
    assert mine.status_code == 201 and mine.json()["id"] != job.json()["id"]
    batch = client.post("/v1/batches", json=ITEMS, headers={"Idempotency-Key": "same"})
    assert batch.status_code == 409  # the key already names a job


def test_uploads_whose_fields_differ_are_different_requests_whatever_the_fields_hold(client):
    """Form fields joined with "|" made these two uploads one request: the second, with a webhook,
    was answered with the first batch, which has none."""
    hook = "https://93.184.216.34/hook"  # public: past the SSRF guard without DNS
    files = {"file": ("lines.txt", b"One line.\n")}
    first = client.post(
        "/v1/batches/upload", files=files, data={"name": f"n|{hook}"}, headers={"Idempotency-Key": "upload"}
    )
    second = client.post(
        "/v1/batches/upload",
        files=files,
        data={"name": "n", "webhook_url": f"{hook}|None"},
        headers={"Idempotency-Key": "upload"},
    )
    assert first.status_code == 201 and first.json()["webhook_url"] is None, first.text
    assert second.status_code == 409 and "different request" in second.json()["detail"], second.text
    again = client.post(
        "/v1/batches/upload", files=files, data={"name": f"n|{hook}"}, headers={"Idempotency-Key": "upload"}
    )
    assert again.status_code == 201 and again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"


def test_concurrent_retries_create_one_batch(client):
    results = []

    def post():
        results.append(client.post("/v1/batches", json=ITEMS, headers={"Idempotency-Key": "race"}))

    threads = [threading.Thread(target=post) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {r.status_code for r in results} == {201}
    assert len({r.json()["id"] for r in results}) == 1
    assert len(client.get("/v1/batches").json()["data"]) == 1


def test_client_ids_are_unique_within_a_batch(client):
    r = client.post("/v1/batches", json={"items": [{"client_id": "x", "text": "A."}, {"client_id": "x", "text": "B."}]})
    assert r.status_code == 400 and "'x' is used twice" in r.json()["detail"]
    assert client.get("/v1/batches").json()["data"] == []


@pytest.fixture
def api_settings(settings):
    return settings.with_overrides(
        max_line_chars=50, api_max_batch_items=3, api_max_body_bytes=2000, api_rate_limit=1000
    )


def test_limits_answer_clear_4xx(client):
    r = client.post("/v1/jobs", json={"text": "x" * 51})
    assert r.status_code == 400 and "the limit is 50" in r.json()["detail"]
    r = client.post("/v1/batches", json={"items": [{"text": "A."}] * 4})
    assert r.status_code == 400 and "the limit per batch is 3" in r.json()["detail"]
    r = client.post("/v1/batches", content=b"{" + b" " * 3000 + b"}", headers={"content-type": "application/json"})
    assert r.status_code == 413 and "2,000 bytes" in r.json()["detail"]
    r = client.post("/v1/jobs", json={"text": "Hi.", "voice": "nobody"})
    assert r.status_code == 400 and "choose one of joe" in r.json()["detail"]
    r = client.post("/v1/jobs", json={"text": "Hi.", "format": "aiff"})
    assert r.status_code == 400 and "wav, mp3, ogg, flac" in r.json()["detail"]
    r = client.post("/v1/jobs", json={"text": "Hi.", "sample_rate": 12345})
    assert r.status_code == 400 and "22050" in r.json()["detail"]
    r = client.post("/v1/jobs", json={"text": "Nul\x00here."})
    assert r.status_code == 422 and "NUL" in r.json()["detail"][0]["msg"]
    assert client.get("/v1/batches", params={"cursor": "garbage!"}).status_code == 400


def test_rate_limit_is_per_key_with_retry_after(api_settings, redis_url, new_key):
    with serve(api_settings.with_overrides(api_rate_limit=3, api_rate_window=60), redis_url) as server:
        a, b = client_for(server, new_key("a")), client_for(server, new_key("b"))
        assert [a.get("/v1/voices").status_code for _ in range(3)] == [200, 200, 200]
        r = a.get("/v1/voices")
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
        assert "3 requests per 60 s" in r.json()["detail"]
        assert b.get("/v1/voices").status_code == 200  # another key has its own window


def test_pagination_walks_every_item_once(client):
    batch = client.post("/v1/batches", json={"items": [{"text": f"Line {i}."} for i in range(3)]}).json()
    seen, cursor = [], None
    while True:
        page = client.get(
            f"/v1/batches/{batch['id']}/items", params={"limit": 1, **({"cursor": cursor} if cursor else {})}
        ).json()
        seen += [j["client_id"] for j in page["data"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == ["item-000001", "item-000002", "item-000003"]
    ids = [client.post("/v1/batches", json=ITEMS).json()["id"] for _ in range(2)] + [batch["id"]]
    first = client.get("/v1/batches", params={"limit": 2}).json()
    second = client.get("/v1/batches", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert sorted(b["id"] for b in first["data"] + second["data"]) == sorted(ids) and second["next_cursor"] is None


def test_cancel_then_delete_then_expiry(api_settings, client, database_url):
    batch = client.post("/v1/batches", json=ITEMS).json()
    assert client.post(f"/v1/batches/{batch['id']}/cancel").json() == {"cancelled": 2}
    got = client.get(f"/v1/batches/{batch['id']}").json()
    assert got["status"] == "cancelled" and got["counts"]["cancelled"] == 2 and got["cancelled_at"]
    store = make_store(api_settings)
    assert store.list(f"batches/{batch['id']}/") == [f"batches/{batch['id']}/manifest.jsonl"]
    assert client.delete(f"/v1/batches/{batch['id']}").json() == {"deleted": True, "objects_removed": 1}
    assert client.get(f"/v1/batches/{batch['id']}").status_code == 404
    assert store.list(f"batches/{batch['id']}/") == []

    job = client.post("/v1/jobs", json={"text": "Cancel me."}).json()
    assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    assert client.get(f"/v1/jobs/{job['id']}/audio").status_code == 409

    keep = client.post("/v1/batches", json=ITEMS).json()
    sessions = make_sessionmaker(make_engine(database_url))
    assert expire_batches(sessions, store, utcnow()) == 0
    assert expire_batches(sessions, store, utcnow() + timedelta(days=7, minutes=1)) == 2  # batch + job
    with sessions() as s:
        assert s.get(Batch, keep["id"]) is None


def test_upload_a_corpus_file(client):
    r = client.post(
        "/v1/batches/upload",
        files={"file": ("lines.txt", b"First line.\n\nSecond line.\n")},
        data={"name": "up", "format": "mp3"},
        headers={"Idempotency-Key": "u1"},
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["name"] == "up" and body["total"] == 2 and body["format"] == "mp3"
    items = client.get(f"/v1/batches/{body['id']}/items").json()["data"]
    assert [j["client_id"] for j in items] == ["line-000001", "line-000003"]
    again = client.post(
        "/v1/batches/upload",
        files={"file": ("lines.txt", b"First line.\n\nSecond line.\n")},
        data={"name": "up", "format": "mp3"},
        headers={"Idempotency-Key": "u1"},
    )
    assert again.json()["id"] == body["id"]
    bad = client.post("/v1/batches/upload", files={"file": ("b.bin", b"\x00\x01")})
    assert bad.status_code == 400 and "binary" in bad.json()["detail"]


def test_an_upload_field_sent_empty_counts_as_not_sent(client):
    """A form's fields are text, and a browser sends a blank input as "": the upload reads it as a
    field left out, where a JSON body's "" is a 422 (tests/api/test_odd_input.py)."""
    r = client.post(
        "/v1/batches/upload",
        files={"file": ("lines.txt", b"One line.\n")},
        data={"format": "", "voice": "", "sample_rate": ""},
    )
    assert r.status_code == 201, r.text
    assert (r.json()["format"], r.json()["voice"], r.json()["sample_rate"]) == ("wav", "joe", None)


def test_expire_task_runs_on_a_worker(client, running_worker):
    batch = client.post("/v1/batches", json=ITEMS).json()
    assert wait_batch(client, batch["id"])["counts"]["done"] == 2
    future = (utcnow() + timedelta(days=8)).isoformat()
    running_worker.send_task("synth.expire", args=[future], queue="realtime")
    eventually(
        lambda: client.get(f"/v1/batches/{batch['id']}").status_code == 404,
        60,
        "synth.expire to delete the expired batch",
        interval=0.2,
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("sample_rate", "8000.0"),
        ("sample_rate", " 8000"),
        ("sample_rate", "8001"),
        ("sample_rate", "fast"),
        ("voice", "nobody"),
        ("format", "aiff"),
        ("priority", "urgent"),
        ("webhook_url", "ftp://example.com/x"),
        ("webhook_events", "job.started"),
        ("name", "x" * 201),
    ],
)
def test_an_upload_with_a_field_outside_the_document_is_refused(client, field, value):
    r = client.post("/v1/batches/upload", files={"file": ("lines.txt", b"One line.\n")}, data={field: value})
    assert r.status_code in (400, 422), (field, value, r.status_code, r.text)
    assert (
        client.post(
            "/v1/batches/upload", files={"file": ("lines.txt", b"One line.\n")}, data={"sample_rate": "8000"}
        ).status_code
        == 201
    )
