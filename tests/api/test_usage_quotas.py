"""Usage and quotas per key, as a tenant and an operator meet them: jobs done through the real API
and a Celery worker thread with Piper are counted in GET /v1/usage, `synth usage`, `synth keys list`
and the report's by-key section; quotas set with `synth keys quota` (a subprocess, as an operator
runs it) refuse work past them with 429 and Retry-After, and nothing of a refused batch is written.
Real Redis, both databases."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from pipeline import api_keys
from pipeline.db.models import Batch
from tests.api.conftest import client_for, wait_job
from tests.cli_helpers import synth, synth_env

TEXT = "Hello there."  # 12 characters


@pytest.fixture
def env(tmp_path, redis_url, database_url):
    return synth_env(SYNTH_DATA_DIR=str(tmp_path / "data"), SYNTH_REDIS_URL=redis_url, SYNTH_DATABASE_URL=database_url)


def run(env, *args: str) -> str:
    done = synth(*args, env=env, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode() + done.stderr.decode()


def batches_of(sessions, key_id: str) -> int:
    with sessions() as s:
        return s.scalar(select(func.count()).select_from(Batch).where(Batch.owner_key_id == key_id))


def test_a_keys_done_jobs_are_counted_and_its_quotas_refuse_work_past_them(
    api_server, running_worker, new_key, sessions, env
):
    plaintext = new_key("acme")
    with sessions() as s:
        key_id = api_keys.authenticate(s, plaintext).id
    run(env, "keys", "quota", "acme", "--chars-per-day", "60")
    with client_for(api_server, plaintext) as client:
        job = client.post("/v1/jobs", json={"text": TEXT})
        assert job.status_code == 201, job.text
        assert wait_job(client, job.json()["id"])["status"] == "done"

        used = client.get("/v1/usage").json()
        assert used["today"]["jobs"] == 1 and used["today"]["chars"] == len(TEXT) and used["today"]["audio_s"] > 0.3
        assert used["month"] == used["today"] and used["unfinished_chars"] == 0
        assert used["quotas"]["chars_per_day"] == 60 and used["quotas"]["audio_s_per_day"] is None
        assert 0 < used["resets_in_s"] <= 86400

        # 12 done + 50 asked > 60: refused whole, before a row is written
        over = client.post("/v1/batches", json={"items": [{"text": "x" * 25}, {"text": "y" * 25}]})
        assert over.status_code == 429, over.text
        assert "quota of 60 characters per day (12 used today, 0 in unfinished jobs)" in over.json()["detail"]
        assert 0 < int(over.headers["Retry-After"]) <= 86400
        assert batches_of(sessions, key_id) == 1

        (row,) = [json.loads(line) for line in run(env, "usage", "--json").splitlines()]
        assert (row["name"], row["today"]["chars"], row["month"]["jobs"]) == ("acme", len(TEXT), 1)
        assert "today: 12 / 60 chars" in run(env, "keys", "list")
        assert run(env, "usage").splitlines()[1].startswith(key_id)  # the id keys quota takes

        run(env, "keys", "quota", key_id, "--chars-per-day", "none", "--audio-seconds-per-day", "0.2")
        over = client.post("/v1/jobs", json={"text": TEXT})
        assert over.status_code == 429 and "quota of 0.2 audio seconds per day" in over.json()["detail"], over.text

        run(env, "keys", "quota", "acme", "--audio-seconds-per-day", "none", "--live-streams", "0")
        speech = client.post("/v1/audio/speech", json={"model": "tts-1", "input": TEXT, "voice": "alloy"})
        assert (
            speech.status_code == 429
            and "may open no live streams (its quota, `synth keys quota --live-streams` is 0)"
            in speech.json()["detail"]
        ), speech.text
        assert batches_of(sessions, key_id) == 1

    report = run(env, "report", "--since", "1h", "--format", "md")
    assert "## By API key" in report and f"| acme | {key_id[:12]} | 1 | 0 | 12 |" in report, report


def test_quotas_given_wrongly_are_refused_with_what_to_give(tmp_path):
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "data"))
    run(env, "keys", "create", "--name", "twin")
    run(env, "keys", "create", "--name", "twin")
    for args, says in [
        (("nobody", "--chars-per-day", "5"), "no active key with id or name 'nobody'"),
        (("twin", "--chars-per-day", "5"), "2 active keys are named 'twin': give the key's id"),
        (("twin", "--chars-per-day", "-1"), "-1 is negative"),
        (("twin", "--live-streams", "1.5"), "'1.5' is not a whole number or none"),
        (("twin",), "give at least one of --chars-per-day"),
    ]:
        done = synth("keys", "quota", *args, env=env, timeout=60)
        assert done.returncode == 2 and says in done.stderr.decode(), (args, done.stderr.decode())
