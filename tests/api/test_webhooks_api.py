"""Webhooks through the HTTP API: a real server, worker and receiver. The signing secret is read
and rotated through /v1/webhooks/secret, the batch's webhooks arrive signed with it, and
/v1/webhooks/deliveries shows every attempt, to the owning key only."""

import pytest

from api.schemas import BatchCreate, JobCreate
from synth_testkit.webhook_receiver import Receiver
from tests.api.conftest import client_for, serve, wait_batch
from tests.waiting import eventually
from tests.workers import app_with_worker


@pytest.fixture
def api_settings(settings):
    return settings.with_overrides(webhook_allow_hosts=("127.0.0.0/8",), webhook_retry_schedule=(0.2, 0.4, 0.8))


@pytest.fixture
def webhook_worker(api_settings, redis_url, piper_engine):
    with app_with_worker(api_settings, redis_url, piper_engine) as app:
        yield app


def test_webhooks_secret_rotation_and_delivery_log(api_server, new_key, webhook_worker):
    with client_for(api_server, new_key("a")) as a, client_for(api_server, new_key("b")) as b:
        secret = a.get("/v1/webhooks/secret").json()
        assert secret["secret"].startswith("whsec_") and secret["previous_secret_valid_until"] is None
        assert a.get("/v1/webhooks/secret").json()["secret"] == secret["secret"]  # stable
        assert b.get("/v1/webhooks/secret").json()["secret"] != secret["secret"]  # per key

        with Receiver(secrets=[secret["secret"]], fail_first=1) as receiver:
            r = a.post(
                "/v1/batches",
                json={
                    "items": [{"text": "Hello there."}, {"text": "Goodbye now."}],
                    "webhook_url": receiver.url,
                    "webhook_events": ["job.finished", "batch.finished"],
                },
            )
            assert r.status_code == 201, r.text
            batch_id = r.json()["id"]
            wait_batch(a, batch_id)
            got = receiver.wait_for(3)
            assert sorted(g.body.count(b'"batch.finished"') for g in got) == [0, 0, 1]

            def first_page_succeeded():
                page = a.get("/v1/webhooks/deliveries", params={"limit": 2}).json()
                return page if all(d["status"] == "succeeded" for d in page["data"]) else None

            page = eventually(first_page_succeeded, 30, "the first page of deliveries to have succeeded", interval=0.1)
            assert len(page["data"]) == 2 and page["next_cursor"]
            rest = a.get("/v1/webhooks/deliveries", params={"limit": 2, "cursor": page["next_cursor"]}).json()
            deliveries = page["data"] + rest["data"]
            assert rest["next_cursor"] is None and len({d["id"] for d in deliveries}) == 3
            for d in deliveries:
                assert d["batch_id"] == batch_id and d["status"] == "succeeded" and d["attempts"] == 2
                assert [x["status_code"] for x in d["attempt_log"]] == [500, 200]
                assert d["attempt_log"][0]["next_attempt_at"] and d["attempt_log"][1]["next_attempt_at"] is None
            assert {d["id"] for d in deliveries} == {g.webhook_id for g in got}
            assert a.get("/v1/webhooks/deliveries", params={"status": "failed"}).json()["data"] == []
            assert b.get("/v1/webhooks/deliveries").json()["data"] == []  # not b's
            assert a.get("/v1/webhooks/deliveries", params={"cursor": "nonsense"}).status_code == 400

        rotated = a.post("/v1/webhooks/secret/rotate").json()
        assert rotated["secret"] != secret["secret"] and rotated["previous_secret_valid_until"]
        assert a.get("/v1/webhooks/secret").json()["secret"] == rotated["secret"]


def test_webhook_routes_need_a_key(api_server):
    with client_for(api_server, None) as anonymous:
        for method, path in [
            ("GET", "/v1/webhooks/secret"),
            ("POST", "/v1/webhooks/secret/rotate"),
            ("GET", "/v1/webhooks/deliveries"),
        ]:
            assert anonymous.request(method, path).status_code == 401


# The API checks webhook URLs at submission (api/creating.py); delivery checks them again
# (tests/webhooks/test_delivery.py), since DNS may change in between.
@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://192.168.0.10:6379/",
        "http://[::ffff:10.0.0.1]/",
        "http://user:pw@example.com/",
        "http://[fec0::1]/",
        "http://192.0.0.192/",
        "https://93.184.216.34:0/hook",
    ],
)
def test_internal_webhook_urls_are_refused_at_submission(client, url):
    r = client.post("/v1/batches", json={"items": [{"text": "Hi."}], "webhook_url": url})
    assert r.status_code == 400 and "webhook" in r.json()["detail"]


def test_a_webhook_host_is_refused_in_the_same_words_whether_it_resolves_inside_or_not_at_all(
    settings, redis_url, new_key
):
    """What an internal name resolves to, or whether it exists, is not for a caller to learn."""
    with serve(settings, redis_url) as server, client_for(server, new_key()) as client:  # no allow-list
        said = {host: _refusal(client, host) for host in ("localhost", "no-such-host.invalid")}
    assert said["localhost"] == said["no-such-host.invalid"], said
    assert "public addresses" in said["localhost"] and "127.0.0.1" not in said["localhost"]


def _refusal(client, host: str) -> str:
    """The 400's detail for a webhook to ``host``, the same for a JSON body and an upload."""
    json_body = client.post("/v1/jobs", json={"text": "Hi.", "webhook_url": f"http://{host}:8080/hook"})
    upload = client.post(
        "/v1/batches/upload", files={"file": ("a.txt", b"One.\n")}, data={"webhook_url": f"http://{host}:8080/hook"}
    )
    assert json_body.status_code == upload.status_code == 400, (json_body.text, upload.text)
    assert json_body.json()["detail"] == upload.json()["detail"]
    return json_body.json()["detail"].replace(host, "HOST")


PUBLIC = "https://93.184.216.34/hook"  # a public address: past the SSRF guard without DNS


def test_an_idempotency_fingerprint_is_the_body_less_the_later_fields_left_unset():
    """A body's fingerprint, which a retry under the same Idempotency-Key must match: its JSON with
    the fields added after bodies were first fingerprinted left out while unset."""
    job = (
        b'{"webhook_url":"https://93.184.216.34/hook","webhook_events":null,"text":"Hi.","client_id":null,'
        b'"voice":null,"format":null,"sample_rate":null,"priority":"batch"}'
    )
    assert JobCreate(text="Hi.", webhook_url=PUBLIC).fingerprinted() == job
    assert b'"loudness_target":-16.0' in JobCreate(text="Hi.", webhook_url=PUBLIC, loudness_target=-16).fingerprinted()
    batch = (
        b'{"webhook_url":"https://93.184.216.34/hook","webhook_events":["batch.finished"],"name":null,"items":[{"client_id":null,'
        b'"text":"Hi.","voice":null,"format":null,"sample_rate":null}],"voice":null,"format":null,'
        b'"sample_rate":null,"priority":"batch"}'
    )
    assert (
        BatchCreate(items=[{"text": "Hi."}], webhook_url=PUBLIC, webhook_events=["batch.finished"]).fingerprinted()
        == batch
    )


def test_events_without_an_address_or_an_empty_list_of_them_are_refused(client):
    """Neither could ever send a webhook: the client is told, and nothing is created."""
    refused = {
        "events, no url": client.post(
            "/v1/batches", json={"items": [{"text": "Hi."}], "webhook_events": ["batch.finished"]}
        ),
        "upload, no url": client.post(
            "/v1/batches/upload", files={"file": ("a.txt", b"One.\n")}, data={"webhook_events": ["batch.finished"]}
        ),
        "empty list": client.post("/v1/jobs", json={"text": "Hi.", "webhook_url": PUBLIC, "webhook_events": []}),
    }
    for what, r in refused.items():
        assert r.status_code == 422, (what, r.text)
        assert r.json()["detail"][0]["loc"][-1] in ("webhook_events", "body"), (what, r.text)
    for what in ("events, no url", "upload, no url"):
        assert "webhook_events needs webhook_url" in refused[what].json()["detail"][0]["msg"], what
    assert "at least 1 item" in refused["empty list"].json()["detail"][0]["msg"]
    assert client.get("/v1/batches").json()["data"] == []
