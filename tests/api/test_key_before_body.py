"""The key is checked before the body is read: a caller without a valid key gets 401 in the error
format of the route, whatever it sends, and a body announced but never sent is not waited for."""

from __future__ import annotations

import http.client
import json
import socket

import httpx
import pytest

ROUTES = ["/v1/batches", "/v1/batches/upload", "/v1/jobs", "/v1/audio/speech"]
LARGE = 14 * 1024 * 1024


def send_head(port: int, path: str, headers: dict[str, str], first_bytes: bytes) -> http.client.HTTPResponse:
    """A POST whose headers announce a large body, of which only ``first_bytes`` are sent; the
    response read off the same socket."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": "synth", "Content-Length": str(LARGE), **headers}.items())
    sock.sendall(f"POST {path} HTTP/1.1\r\n{head}\r\n".encode() + first_bytes)
    response = http.client.HTTPResponse(sock)
    try:
        response.begin()
        response.body = response.read()
    finally:
        sock.close()
    return response


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("authorization", [None, "Bearer sk_synth_not-a-key"])
def test_no_valid_key_is_a_401_before_the_body_arrives(api_server, path, authorization):
    headers = {"Content-Type": "application/json"} | ({"Authorization": authorization} if authorization else {})
    response = send_head(api_server.port, path, headers, b'{"items": [' * 4096)
    assert response.status == 401, response.body
    assert response.getheader("WWW-Authenticate") == "Bearer"
    body = json.loads(response.body)
    assert body["detail"] == (
        "missing API key: send `Authorization: Bearer sk_synth_...`"
        if authorization is None
        else "invalid or revoked API key"
    )
    # The OpenAI-compatible route answers in OpenAI's error object too, as for every other error.
    assert ("error" in body) == path.startswith("/v1/audio/")


def test_a_whole_large_invalid_body_without_a_key_is_a_401_and_the_connection_serves_on(api_server, new_key):
    with httpx.Client(base_url=api_server.url, timeout=60) as http:
        refused = http.post("/v1/batches", content=b"{" * LARGE, headers={"Content-Type": "application/json"})
        assert refused.status_code == 401, refused.text
        # The same client (its kept-alive connection) is answered next, with a key.
        voices = http.get("/v1/voices", headers={"Authorization": f"Bearer {new_key()}"})
        assert voices.status_code == 200, voices.text


def test_with_a_key_the_body_is_still_validated(client):
    invalid = client.post("/v1/batches", content=b"{" * 1024, headers={"Content-Type": "application/json"})
    assert invalid.status_code == 422, invalid.text
    assert client.post("/v1/jobs", json={"text": "Hello."}).status_code == 201
