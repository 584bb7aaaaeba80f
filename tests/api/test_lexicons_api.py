"""/v1/lexicons: bad input gets a clear 4xx with nothing half-applied, and one key never sees,
changes or renders with another key's lexicon."""

from __future__ import annotations

from tests.api.conftest import client_for

PLS = (
    '<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa">'
    "<lexeme><grapheme>ICU</grapheme><alias>intensive care unit</alias></lexeme></lexicon>"
)


def test_bad_lexicon_input_is_refused_with_the_reason_and_nothing_is_half_applied(client):
    r = client.post("/v1/lexicons", json={"name": "default", "entries": [{"written": "SQL", "alias": "sequel"}]})
    assert r.status_code == 201 and r.json()["version"] == 1, r.text
    cases = [
        ("/v1/lexicons/default/import", {"content": b"<lexicon><oops>"}, "not a PLS file: not well-formed XML"),
        (
            "/v1/lexicons/default/import",
            {"content": b"<speak>hi</speak>"},
            "not a PLS file: the root element is <speak>",
        ),
        ("/v1/lexicons/default/import", {"files": {"file": ("n.txt", b"ICU = x")}}, "as the request body"),
        ("/v1/lexicons/default/entries", {"json": {"add": [{"written": "", "alias": "x"}]}}, "written form is empty"),
        (
            "/v1/lexicons/default/entries",
            {"json": {"add": [{"written": "GIF", "alias": "jif"}, {"written": "x" * 10_000, "alias": "y"}]}},
            "the written form has 10,000 characters; the limit is 200",
        ),
        (
            "/v1/lexicons/default/entries",
            {"json": {"add": [{"written": "*", "alias": "x", "pattern": True}]}},
            "would match (nearly) every word",
        ),
        (
            "/v1/lexicons/default/entries",
            {"json": {"add": [{"written": "Nguyen", "phoneme": "ŋw<ɪn"}]}},
            "the piper voice cannot say '<'",
        ),
        (
            "/v1/lexicons/default/import?replace=true",
            {"content": "".join(f"w{i} = x\n" for i in range(100_000)).encode()},
            "100,000 entries; the limit per lexicon is 50,000",
        ),
    ]
    for path, body, reason in cases:
        r = client.post(path, **body)
        assert r.status_code == 400 and reason in r.json()["detail"], (path, r.text[:300])
    for entry in ({"written": "GIF", "alias": "jif", "case_sensitive": "yes"}, {"written": "GIF", "says": "jif"}):
        r = client.post("/v1/lexicons/default/entries", json={"add": [entry]})  # read strictly, as every body
        assert r.status_code == 422, r.text
    shown = client.get("/v1/lexicons/default").json()
    assert shown["version"] == 1 and [e["written"] for e in shown["entries"]] == ["SQL"]

    assert client.post("/v1/lexicons/default/import", content=PLS.encode()).json()["version"] == 2
    text = client.get("/v1/lexicons/default/export", params={"format": "text"}).text
    assert text == "SQL = sequel\nICU = intensive care unit\n"
    assert "<grapheme>ICU</grapheme>" in client.get("/v1/lexicons/default/export").text
    assert client.post("/v1/lexicons", json={"name": "default"}).status_code == 400


def test_another_keys_lexicon_is_not_found_anywhere_and_never_its_default(client, api_server, new_key):
    made = client.post("/v1/lexicons", json={"name": "default", "entries": [{"written": "ICU", "alias": "x"}]})
    lexicon_id = made.json()["id"]
    mine = client.post(
        "/v1/batches", json={"items": [{"text": "The ICU."}], "lexicon_version": 1, "lexicon": "default"}
    ).json()
    assert (mine["lexicon_id"], mine["lexicon_version"]) == (lexicon_id, 1)
    with client_for(api_server, new_key("b")) as other:
        for ref in ("default", lexicon_id):
            assert other.get(f"/v1/lexicons/{ref}").status_code == 404
            assert other.post(f"/v1/lexicons/{ref}/entries", json={"remove": ["ICU"]}).status_code == 404
            assert other.get(f"/v1/lexicons/{ref}/export").status_code == 404
            assert other.delete(f"/v1/lexicons/{ref}").status_code == 404
            r = other.post("/v1/batches", json={"items": [{"text": "The ICU."}], "lexicon": ref})
            assert r.status_code == 404 and "not found" in r.json()["detail"]
        assert other.post("/v1/lexicons/default/apply", json={"batch_id": mine["id"]}).status_code == 404
        theirs = other.post("/v1/batches", json={"items": [{"text": "The ICU."}]}).json()
        assert theirs["lexicon_id"] is None  # A's default is not B's
        assert other.get("/v1/lexicons").json() == {"data": []}
    assert client.get(f"/v1/lexicons/{lexicon_id}").json()["version"] == 1
