"""POST /v1/batches/{id}/retry through a real server and worker: the failed jobs of a batch run
again as the same jobs, and their webhooks are sent; another key's batch is a 404, and a batch with
nothing to retry a 409."""

import json

import pytest

from synth_testkit.webhook_receiver import Receiver
from tests.api.conftest import client_for, wait_batch
from tests.workers import app_with_worker


@pytest.fixture
def api_settings(settings):
    return settings.with_overrides(
        api_rate_limit=0,
        max_retries=1,
        retry_backoff_max=1,
        webhook_allow_hosts=("127.0.0.0/8",),
        webhook_retry_schedule=(0.2, 0.4),
    )


def test_retry_reruns_the_failed_jobs_and_sends_their_webhooks(
    api_server, api_settings, new_key, redis_url, piper_engine
):
    with client_for(api_server, new_key("a")) as a, client_for(api_server, new_key("b")) as b:
        secret = a.get("/v1/webhooks/secret").json()["secret"]
        with Receiver(secrets=[secret]) as receiver:
            created = a.post(
                "/v1/batches",
                json={
                    "items": [
                        {"text": "Hello there.", "client_id": "one"},
                        {"text": "Goodbye now.", "client_id": "two"},
                    ],
                    "webhook_url": receiver.url,
                    "webhook_events": ["job.finished"],
                },
            )
            assert created.status_code == 201, created.text
            batch_id = created.json()["id"]
            # Its audio folder is a file until the retry: every job fails, its retries spent.
            blocker = api_settings.object_dir / "batches" / batch_id / "audio"
            blocker.parent.mkdir(parents=True)
            blocker.write_text("not a folder")
            with app_with_worker(api_settings, redis_url, piper_engine):
                failed = wait_batch(a, batch_id)
                assert failed["counts"]["failed"] == 2, failed
                assert b.post(f"/v1/batches/{batch_id}/retry").status_code == 404
                nothing = a.post(f"/v1/batches/{batch_id}/retry", params={"reason": "No space left"})
                assert nothing.status_code == 409 and "no failed jobs whose reason contains" in nothing.json()["detail"]

                blocker.unlink()
                retried = a.post(f"/v1/batches/{batch_id}/retry", params={"reason": "File exists"})
                assert retried.status_code == 200 and retried.json() == {"retried": 2}
                done = wait_batch(a, batch_id)
                assert done["counts"]["done"] == 2 and done["status"] == "finished", done
                got = receiver.wait_for(2)
            events = [json.loads(r.body) for r in got]
            assert sorted(e["data"]["client_id"] for e in events) == ["one", "two"]
            assert {e["type"] for e in events} == {"job.finished"}
        again = a.post(f"/v1/batches/{batch_id}/retry")
        assert again.status_code == 409 and again.json()["detail"] == f"batch {batch_id} has no failed jobs"
        items = a.get(f"/v1/batches/{batch_id}/items").json()["data"]
        assert [i["client_id"] for i in items] == ["one", "two"]


def test_retry_of_an_unknown_batch_is_a_404(client):
    assert client.post("/v1/batches/0123456789abcdef0123456789abcdef/retry").status_code == 404
