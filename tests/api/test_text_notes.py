"""The API's job view says what the text front end changed, and only when it changed something."""

from __future__ import annotations

from tests.api.conftest import wait_job


def test_a_jobs_view_lists_what_was_dropped_and_a_plain_job_has_no_notes(client, running_worker):
    r = client.post("/v1/jobs", json={"text": "<b>Hi</b> there 🎉, Москва.", "format": "wav"})
    assert r.status_code == 201, r.text
    assert r.json()["text_notes"] is None  # not rendered yet
    job = wait_job(client, r.json()["id"])
    assert job["status"] == "done"
    assert job["text_notes"] == {"tags_removed": 2, "emoji_dropped": 1, "foreign_chars_dropped": 6}

    plain = wait_job(client, client.post("/v1/jobs", json={"text": "Hello there."}).json()["id"])
    assert plain["status"] == "done" and plain["text_notes"] is None


def test_a_line_in_a_script_the_voice_cannot_read_fails_with_the_reason(client, running_worker):
    job = wait_job(client, client.post("/v1/jobs", json={"text": "Москва"}).json()["id"])
    assert job["status"] == "failed"
    assert "voice 'joe' speaks en_US, and 6 characters of other scripts were dropped" in job["error"]
