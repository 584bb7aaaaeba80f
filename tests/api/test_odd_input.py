"""Input an attacker or a fuzzer sends gets a 4xx that says why, never a 500: NUL bytes in ids,
edited cursors, lone surrogates, non-finite numbers, NUL bytes deep in an upload, chunked bodies
over the limit, upper-case URL schemes, repeated file parts."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from api.schemas import SpeechCreate
from synth_testkit.faults import RedisProcess
from synth_testkit.ports import free_port
from tests.api.conftest import client_for, serve


def test_ids_that_cannot_exist_answer_404(client):
    batch_id = client.post("/v1/batches", json={"items": [{"text": "One."}]}).json()["id"]
    for path in (
        "/v1/batches/%00",
        f"/v1/batches/{batch_id}%00",
        "/v1/batches/%00/items",
        "/v1/jobs/%00",
        "/v1/jobs/%00/audio",
        "/v1/jobs/%00/stream",
        "/v1/jobs/%ED%A0%80",
    ):
        assert client.get(path).status_code == 404, path
    assert client.post("/v1/batches/%00/cancel").status_code == 404
    assert client.delete("/v1/batches/%00").status_code == 404


@pytest.mark.parametrize(
    "values",
    [
        [1, "\u0000"],
        [1, "\ud800"],
        [2147483648, "a"],
        [True, "a"],
        [-1, "a"],
        [1.5, "a"],
        [1, ["a"]],
        ["2026-01-01T00:00:00", "\u0000"],
    ],
)
def test_edited_cursors_answer_400(client, values):
    batch_id = client.post("/v1/batches", json={"items": [{"text": "One."}]}).json()["id"]
    raw = base64.urlsafe_b64encode(json.dumps(values).encode()).decode()
    for path in (f"/v1/batches/{batch_id}/items", "/v1/batches", "/v1/webhooks/deliveries"):
        r = client.get(path, params={"cursor": raw})
        assert r.status_code == 400 and "malformed cursor" in r.json()["detail"], (path, r.text)


@pytest.mark.parametrize(
    "path,body",
    [
        ("/v1/batches", '{"items": [{"text": "\\ud800"}]}'),
        ("/v1/batches", '{"items": [{"text": "One.", "client_id": "\\udfff"}], "name": "\\ud800"}'),
        ("/v1/jobs", '{"text": "One.", "webhook_url": "https://example.com/\\ud800"}'),
        ("/v1/audio/speech", '{"model": "tts-1", "voice": "alloy", "input": "\\ud800"}'),
        ("/v1/jobs", '{"text": "One.", "sample_rate": 1e400}'),
        ("/v1/batches", '{"items": [{"text": "One.", "sample_rate": -1e400}]}'),
        ("/v1/audio/speech", '{"model": "tts-1", "voice": "alloy", "input": "Hi.", "speed": NaN}'),
        ("/v1/audio/speech", '{"model": "tts-1", "voice": "alloy", "input": "Hi.", "speed": Infinity}'),
    ],
)
def test_unencodable_input_gets_a_422_that_encodes(client, path, body):
    r = client.post(path, content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail[0]["msg"]
    if path == "/v1/audio/speech":
        assert r.json()["error"]["type"] == "invalid_request_error" and r.json()["error"]["message"]


SPEECH = {"model": "tts-1", "voice": "alloy", "input": "Hi."}
SPEECH_PATH = "/v1/audio/speech"


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/v1/jobs", {"text": "One.", "format": ""}, "format"),
        ("/v1/jobs", {"text": "One.", "voice": ""}, "voice"),
        ("/v1/jobs", {"text": "One.", "sample_rate": "24000"}, "sample_rate"),
        ("/v1/jobs", {"text": "One.", "sample_rate": True}, "sample_rate"),
        ("/v1/jobs", {"text": "One.", "sample_rate": 24000.5}, "sample_rate"),
        ("/v1/batches", {"items": [{"text": "One.", "sample_rate": "24000"}]}, "sample_rate"),
        ("/v1/batches", {"items": [{"text": "One."}], "format": ""}, "format"),
        ("/v1/audio/speech", {**SPEECH, "speed": "1"}, "speed"),
        ("/v1/audio/speech", {**SPEECH, "speed": True}, "speed"),
    ],
)
def test_a_value_of_another_type_than_the_document_gives_is_refused_not_guessed(client, path, body, field):
    r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    assert [e["loc"][-1] for e in r.json()["detail"]] == [field], r.text


def test_numbers_as_json_writes_them_are_accepted(client):
    """24000.0 is an integer to JSON Schema, and an OpenAI client sends speed 1 as an integer."""
    job = client.post("/v1/jobs", json={"text": "One.", "sample_rate": 24000.0})
    assert job.status_code == 201 and job.json()["sample_rate"] == 24000, job.text
    # as FastAPI validates a body: the parsed JSON (a speech request would wait here for a worker)
    assert (
        SpeechCreate.model_validate(
            json.loads('{"model": "tts-1", "voice": "alloy", "input": "Hi.", "speed": 1}')
        ).speed
        == 1.0
    )


def test_a_nul_byte_deep_in_an_upload_is_refused_with_its_line(client):
    data = b"A line of text.\n" * 5000 + b"nul\x00here\n"
    r = client.post("/v1/batches/upload", files={"file": ("big.txt", data)})
    assert r.status_code == 400 and "line 5001" in r.json()["detail"]


def test_two_file_parts_are_refused(client):
    r = client.post("/v1/batches/upload", files=[("file", ("a.txt", b"One.\n")), ("file", ("b.txt", b"Two.\n"))])
    assert r.status_code == 400 and "one file" in r.json()["detail"]
    assert client.get("/v1/batches").json()["data"] == []


def test_an_upper_case_scheme_is_a_url_like_any_other(client):
    r = client.post("/v1/jobs", json={"text": "One.", "webhook_url": "HTTPS://93.184.216.34/hook"})
    assert r.status_code == 201, r.text


def test_a_chunked_body_over_the_limit_gets_413(api_settings, redis_url, new_key):
    part = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n'

    def chunks(head: bytes):
        yield head
        for _ in range(10):
            yield b"Some words. " * 40

    with (
        serve(api_settings.with_overrides(api_max_body_bytes=2000), redis_url) as server,
        client_for(server, new_key()) as c,
    ):
        for path, kind, head in (
            ("/v1/batches", "application/json", b'{"items": [{"text": "'),
            ("/v1/audio/speech", "application/json", b'{"input": "'),
            ("/v1/batches/upload", "multipart/form-data; boundary=b", part),
        ):
            r = c.post(path, content=chunks(head), headers={"content-type": kind})
            assert r.status_code == 413 and "2,000 bytes" in r.json()["detail"], (path, r.text)
            assert "content-length" not in r.request.headers  # sent chunked


def test_speech_errors_carry_openais_error_object(client):
    body = {"model": "tts-1", "voice": "alloy", "input": "Hi."}
    first = client.post("/v1/audio/speech", json={**body, "voice": "zeus"})
    assert first.status_code == 400 and first.json()["error"]["param"] == "voice"
    client.post("/v1/jobs", json={"text": "Hi."}, headers={"Idempotency-Key": "taken"})
    clash = client.post("/v1/audio/speech", json=body, headers={"Idempotency-Key": "taken"})
    assert clash.status_code == 409 and "different request" in clash.json()["error"]["message"]
    long = client.post("/v1/audio/speech", json={**body, "input": "x" * 30_000})
    assert long.status_code == 400 and "the limit is" in long.json()["error"]["message"]
    anonymous = httpx.post(f"{client.base_url}/v1/audio/speech", json=body)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["message"]


def test_openai_error_objects_carry_the_types_and_codes_openai_uses(api_settings, redis_url, new_key, tmp_path):
    """A bad key, a rate limit and a failure of ours read as OpenAI's own; native routes keep
    synth's {"detail": ...}."""
    with serve(api_settings.with_overrides(api_rate_limit=1), redis_url) as server, client_for(server, new_key()) as c:
        bad_key = httpx.post(f"{server.url}{SPEECH_PATH}", json=SPEECH, headers={"Authorization": "Bearer sk_synth_no"})
        assert bad_key.status_code == 401
        assert bad_key.json()["error"] | {"message": ""} == {
            "message": "",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
        typed = c.post(SPEECH_PATH, json={**SPEECH, "speed": "1"})  # the window's one request
        assert typed.status_code == 422 and typed.json()["error"]["param"] == "speed", typed.text
        assert (typed.json()["error"]["type"], typed.json()["error"]["code"]) == ("invalid_request_error", None)
        limited = c.post(SPEECH_PATH, json=SPEECH)
        assert limited.status_code == 429 and limited.headers["Retry-After"]
        assert (limited.json()["error"]["type"], limited.json()["error"]["code"]) == ("requests", "rate_limit_exceeded")
        native = c.post("/v1/jobs", json={"text": "Hi."})
        assert native.status_code == 429 and set(native.json()) == {"detail"}

    redis = RedisProcess(tmp_path / "redis", free_port())
    with redis, serve(api_settings, redis.url) as server, client_for(server, new_key()) as c:
        redis.kill()
        down = c.post(SPEECH_PATH, json=SPEECH)
        assert down.status_code == 503, down.text
        assert (down.json()["error"]["type"], down.json()["error"]["code"]) == ("server_error", None)


def test_options_lists_the_methods_of_a_path(api_server):
    r = httpx.options(f"{api_server.url}/v1/batches/some-id")
    assert r.status_code == 204 and set(r.headers["allow"].split(", ")) == {"GET", "DELETE", "OPTIONS"}
    assert set(httpx.options(f"{api_server.url}/v1/batches").headers["allow"].split(", ")) == {"GET", "POST", "OPTIONS"}
    assert httpx.options(f"{api_server.url}/v1/nothing-here").status_code == 404
    assert httpx.put(f"{api_server.url}/v1/batches").status_code == 405


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/v1/nothing-here"),
        ("GET", "/v1/job/x"),
        ("POST", "/v1/job"),
        ("GET", "/nothing"),
        ("DELETE", "/v1/jobs/x/nothing"),
    ],
)
def test_a_path_no_route_serves_answers_404_not_405(api_server, method, path):
    r = httpx.request(method, f"{api_server.url}{path}")
    assert r.status_code == 404, r.text
    assert r.json()["detail"] == "Not Found"


def test_options_prefers_a_literal_path_to_a_template(api_server):
    assert httpx.options(f"{api_server.url}/v1/batches/upload").headers["allow"] == "POST, OPTIONS"
    assert httpx.options(f"{api_server.url}/v1/jobs/x/audio").headers["allow"] == "GET, OPTIONS"


@pytest.mark.parametrize(
    "path, body, files",
    [
        ("/v1/jobs", {"json": {"text": "One.", "webhook_url": "ftp://example.com/hook"}}, None),
        ("/v1/jobs", {"json": {"text": "One.", "webhook_url": "https://exa mple.com/hook"}}, None),
        ("/v1/batches/upload", {"data": {"webhook_url": "example.com/hook"}}, {"file": ("a.txt", b"One.\n")}),
    ],
)
def test_a_webhook_url_that_is_not_a_url_gets_a_422_saying_what_it_must_be(client, path, body, files):
    r = client.post(path, files=files, **body)
    assert r.status_code == 422, r.text
    [error] = r.json()["detail"]
    assert "must be an http:// or https:// URL" in error["msg"] and "[Hh]" not in error["msg"], error


def test_a_client_id_with_a_control_character_gets_a_422_saying_so(client):
    r = client.post("/v1/batches", json={"items": [{"text": "One.", "client_id": "a\tb"}]})
    assert r.status_code == 422, r.text
    [error] = r.json()["detail"]
    assert error["loc"] == ["body", "items", 0, "client_id"] and "control characters" in error["msg"], error


def test_streaming_a_queued_batch_job_answers_409_naming_where_its_file_will_be(client):
    # No worker runs, so the job stays queued.
    job_id = client.post("/v1/jobs", json={"text": "One."}).json()["id"]
    r = client.get(f"/v1/jobs/{job_id}/stream")
    assert r.status_code == 409, r.text
    assert f"/v1/jobs/{job_id}/audio" in r.json()["detail"], r.text


def test_an_items_cursor_of_another_batch_answers_400_instead_of_skipping_lines(client):
    first, second = (
        client.post("/v1/batches", json={"items": [{"text": f"Line {i}."} for i in range(4)]}).json()["id"]
        for _ in range(2)
    )
    cursor = client.get(f"/v1/batches/{first}/items", params={"limit": 2}).json()["next_cursor"]
    assert client.get(f"/v1/batches/{first}/items", params={"cursor": cursor}).status_code == 200
    r = client.get(f"/v1/batches/{second}/items", params={"cursor": cursor})
    assert r.status_code == 400 and f"/v1/batches/{second}/items" in r.json()["detail"], r.text
