"""Jobs checked as they render (SYNTH_VERIFY): the verdict and word times reach the manifest,
`synth fetch`, the API's job resource and captions route, and `synth status`."""

from __future__ import annotations

import json

import pytest
import srt

from pipeline.errors import InputError
from pipeline.verify.jobs import Verifier, verify_share
from pipeline.verify.recognizer import PocketSphinx
from tests.api.conftest import wait_batch
from tests.cli_helpers import synth, synth_env
from tests.waiting import eventually

pytest.importorskip("pocketsphinx")

GOOD = "The library opens at nine in the morning and closes at six in the evening."


@pytest.fixture
def api_settings(settings):
    return settings.with_overrides(api_rate_limit=0, verify="all")


def test_a_checked_batch_reports_verdicts_and_serves_captions(client, running_worker):
    r = client.post(
        "/v1/batches",
        json={
            "format": "mp3",
            "items": [
                {"client_id": "good", "text": GOOD},
                {"client_id": "live", "text": "Hello there.", "format": "wav"},
            ],
        },
    )
    assert r.status_code == 201, r.text
    batch = wait_batch(client, r.json()["id"])
    assert batch["counts"]["done"] == 2

    def checked():  # the worker's checks come after its renders, on the verify queue
        items = client.get(f"/v1/batches/{batch['id']}/items").json()["data"]
        return None if any(j["verdict"] == "pending" for j in items) else items

    jobs = {j["client_id"]: j for j in eventually(checked, 60, "the checks", interval=0.1)}
    good = jobs["good"]
    assert good["verdict"] == "clean" and good["verdict_reasons"] == [] and good["captions_url"]
    subs = list(srt.parse(client.get(good["captions_url"], params={"format": "srt"}).text))
    assert " ".join(s.content for s in subs) == GOOD  # the words as written, punctuation and all
    words = client.get(good["captions_url"], params={"format": "json"}).json()["words"]
    assert [w["word"] for w in words][:3] == ["The", "library", "opens"]
    assert client.get(good["captions_url"], params={"format": "doc"}).status_code == 422


def test_an_unchecked_job_has_no_captions(api_settings, client, running_worker):
    r = client.post("/v1/jobs", json={"text": GOOD, "priority": "realtime"})
    job_id = r.json()["id"]
    from tests.api.conftest import wait_job

    job = wait_job(client, job_id)
    assert job["verdict"] is None and job["captions_url"] is None
    assert client.get(f"/v1/jobs/{job_id}/captions").status_code == 409


def test_the_share_checked_and_its_setting():
    assert verify_share("auto", on_cpu=True) == 1.0 and verify_share("auto", on_cpu=False) == 0.0
    assert verify_share("0.25", on_cpu=False) == 0.25 and verify_share("off", on_cpu=True) == 0.0
    assert verify_share("sample", on_cpu=False, sample=0.05) == 0.05
    with pytest.raises(InputError, match="SYNTH_VERIFY"):
        verify_share("sometimes", on_cpu=True)
    quarter = Verifier(PocketSphinx(), 0.25)
    picked = [quarter.wants(f"job-{i}") for i in range(2000)]
    assert 0.2 < sum(picked) / len(picked) < 0.3
    assert picked == [quarter.wants(f"job-{i}") for i in range(2000)]  # the same jobs every time


@pytest.mark.slow
def test_submit_checks_every_job_on_the_cpu_by_default(tmp_path):
    """The embedded default as a user runs it: nothing set, the verdicts in the summary and the
    manifest, and the captions beside the audio in the output folder."""
    corpus = tmp_path / "lines.txt"
    corpus.write_text(GOOD + "\nPlease remember to bring your ticket and a form of identification.\n")
    out = tmp_path / "out"
    done = synth("submit", str(corpus), "-o", str(out), env=synth_env(SYNTH_DATA_DIR=str(tmp_path / "data")))
    assert done.returncode == 0, done.stderr.decode()
    assert "checked against the text: 2 of 2 jobs clean" in done.stderr.decode()
    for line in map(json.loads, (out / "manifest.jsonl").read_text().splitlines()):
        assert line["verdict"] == "clean" and line["captions"] is True
        stem = line["file"].rsplit(".", 1)[0]
        assert list(srt.parse((out / f"{stem}.srt").read_text()))
        assert (out / f"{stem}.vtt").read_text().startswith("WEBVTT")
        assert json.loads((out / f"{stem}.words.json").read_text())["words"]
