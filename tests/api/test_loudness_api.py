"""A levelled batch through the API: loudness_target on the batch, each job's measured level on
its resource, the audio read back by ffmpeg's meter."""

from __future__ import annotations

import pytest

from tests.api.conftest import wait_batch
from tests.test_loudness import LINES, ebur128


def test_a_batch_levelled_to_a_target_reports_and_delivers_it(client, running_worker):
    r = client.post(
        "/v1/batches",
        json={"format": "wav", "loudness_target": -18, "true_peak_max": -2, "items": [{"text": t} for t in LINES[:2]]},
    )
    assert r.status_code == 201, r.text
    assert r.json()["loudness_target"] == -18 and r.json()["true_peak_max"] == -2
    batch = wait_batch(client, r.json()["id"])
    assert batch["counts"]["done"] == 2
    for job in client.get(f"/v1/batches/{batch['id']}/items").json()["data"]:
        assert job["loudness_target"] == -18
        assert job["loudness_lufs"] == pytest.approx(-18, abs=0.1) and job["true_peak_dbtp"] <= -2
        audio = client.get(f"/v1/jobs/{job['id']}/audio", params={"redirect": "false"}).content
        lufs, peak = ebur128(audio)
        assert lufs == pytest.approx(-18, abs=0.5) and peak <= -2 + 0.1


def test_an_unlevelled_job_still_records_its_loudness(client, running_worker):
    from tests.api.conftest import wait_job

    r = client.post("/v1/jobs", json={"text": LINES[0], "format": "wav"})
    job = wait_job(client, r.json()["id"])
    assert job["loudness_target"] is None
    lufs, _ = ebur128(client.get(f"/v1/jobs/{job['id']}/audio", params={"redirect": "false"}).content)
    assert job["loudness_lufs"] == pytest.approx(lufs, abs=0.3)


@pytest.mark.parametrize(
    "body, status",
    [
        ({"loudness_target": 0}, 422),
        ({"loudness_target": -16, "true_peak_max": 1}, 422),
        ({"loudness_target": "loud"}, 422),
        ({"true_peak_max": -2}, 400),
    ],
)
def test_a_target_out_of_range_is_refused_before_anything_is_written(client, body, status):
    r = client.post("/v1/batches", json={"items": [{"text": "Hello."}], **body})
    assert r.status_code == status, r.text
    assert client.get("/v1/batches").json()["data"] == []
