"""Lexicons heard through the offline recognizer (tests/speech.py) on Piper, over the API and a real
worker: an entry reads an abbreviation as its words and a phoneme entry as its sounds, a removed
entry takes that back, another key hears none of it; and a change re-renders only the jobs of a
batch it touches."""

from __future__ import annotations

import pytest

from tests.api.conftest import client_for, wait_batch
from tests.speech import transcribe

pytest.importorskip("pocketsphinx")
# Rendering is the cost here; the database paths are covered on both databases elsewhere.
pytestmark = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)

# A city pocketsphinx hears in Piper's voice in 149 renders of 150 (Tokyo: 38 of 40), since the
# control and the opt-out below need the recognizer to hear it whenever it is said.
LINES = ["Please call the ICU now.", "Please call Chicago now."]
ALIAS = {"intensive", "care", "unit"}
ENTRIES = [{"written": "ICU", "alias": "intensive care unit"}, {"written": "Chicago", "phoneme": "ˈɡɑːɹdən"}]


def heard(client, items: list[str], **body) -> tuple[dict, list[str]]:
    batch = client.post("/v1/batches", json={"items": [{"text": t} for t in items], "format": "wav", **body}).json()
    assert wait_batch(client, batch["id"])["counts"]["done"] == len(items)
    jobs = client.get(f"/v1/batches/{batch['id']}/items").json()["data"]
    return batch, [transcribe(client.get(j["audio_url"]).content) for j in jobs]


def test_an_entry_is_heard_a_removed_one_is_not_and_another_key_hears_neither(
    client, api_server, new_key, running_worker
):
    lexicon = client.post("/v1/lexicons", json={"name": "default", "entries": ENTRIES}).json()
    # The control, and the scope: key B, with A's default lexicon in place, hears the text as Piper
    # reads it, the letters and the city.
    with client_for(api_server, new_key("b")) as other:
        control_batch, control = heard(other, LINES)
    assert not ALIAS & set(control[0].split())  # letters, heard as anything
    assert "garden" not in control[1] and "chicago" in control[1]
    assert control_batch["lexicon_id"] is None

    batch, said = heard(client, LINES)
    # /ˈɡɑːɹdən/ is heard as "garden" or "guardian": never as the city
    # Two of the alias's three words: the recognizer now and then splits "intensive" ("in tents")
    assert len(ALIAS & set(said[0].split())) >= 2 and "chicago" not in said[1], said
    job = client.get(f"/v1/batches/{batch['id']}/items").json()["data"][0]
    assert (job["lexicon_id"], job["lexicon_version"]) == (lexicon["id"], 1)
    assert job["text_notes"] == {"lexicon_entries": 1}

    assert client.post("/v1/lexicons/default/entries", json={"remove": ["ICU"]}).json()["version"] == 2
    _, taken_back = heard(client, LINES[:1])
    assert not ALIAS & set(taken_back[0].split())

    r = client.post(
        "/v1/audio/speech", json={"model": "m", "input": LINES[1], "voice": "joe", "response_format": "wav"}
    )
    assert r.status_code == 200 and "chicago" not in transcribe(r.content)
    spoken = client.get(f"/v1/jobs/{r.headers['X-Job-Id']}").json()
    assert (spoken["lexicon_id"], spoken["lexicon_version"]) == (lexicon["id"], 2)
    r = client.post(
        "/v1/audio/speech",
        json={"model": "m", "input": LINES[1], "voice": "joe", "response_format": "wav"},
        headers={"X-Synth-Lexicon": "none"},
    )
    assert "chicago" in transcribe(r.content)


def test_a_change_re_renders_exactly_the_jobs_whose_text_it_touches(client, running_worker):
    client.post("/v1/lexicons", json={"name": "names", "entries": [{"written": "ICU", "alias": "I see you"}]})
    items = [f"Line {n} is plain." if n not in (7, 23, 41) else f"Line {n} goes to NYC." for n in range(50)]
    batch = client.post("/v1/batches", json={"items": [{"text": t} for t in items], "lexicon": "names"}).json()
    assert wait_batch(client, batch["id"])["counts"]["done"] == 50
    before = {j["id"]: j for j in client.get(f"/v1/batches/{batch['id']}/items").json()["data"]}

    client.post("/v1/lexicons/names/entries", json={"add": [{"written": "NYC", "alias": "New York City"}]})
    r = client.post("/v1/lexicons/names/apply", json={"batch_id": batch["id"]})
    assert r.json() == {"lexicon_version": 2, "rerendered": 3, "untouched": 47}, r.text
    assert wait_batch(client, batch["id"])["lexicon_version"] == 2
    after = {j["id"]: j for j in client.get(f"/v1/batches/{batch['id']}/items").json()["data"]}

    again = [j for j in after.values() if j["attempts"] == 2]
    assert sorted(j["client_id"] for j in again) == ["item-000008", "item-000024", "item-000042"]
    assert all(j["lexicon_version"] == 2 and j["text_notes"] == {"lexicon_entries": 1} for j in again)
    kept = [j for j in after.values() if j["attempts"] == 1]
    assert len(kept) == 47 and all(j == before[j["id"]] for j in kept)  # not rendered, not rewritten
    assert client.post("/v1/lexicons/names/apply", json={"batch_id": batch["id"]}).json()["rerendered"] == 0
