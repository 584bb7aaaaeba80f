"""One key never sees or touches another's work: every route with an id, called with key B on key
A's ids, answers 404 and changes nothing. Routes are enumerated from the app, so a new route with an
id parameter is covered (or fails here) without anyone remembering to add it."""

from __future__ import annotations

from api.app import create_app
from pipeline.corpus import parse_corpus
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.submit import BatchOptions, create_batch
from tests.api.conftest import client_for


def _id_routes(settings, redis_url) -> list[tuple[str, str]]:
    """Every (method, path) with a path parameter, from the app's own OpenAPI document (which lists
    every route of every included router)."""
    paths = create_app(settings, broker_url=redis_url).openapi()["paths"]
    routes = [(method.upper(), path) for path, ops in paths.items() if "{" in path for method in ops]
    assert len(routes) >= 8  # 4 batch routes, 4 job routes (and whatever is added later)
    return routes


def test_every_route_with_an_id_is_404_for_another_key(api_settings, api_server, new_key, redis_url):
    a, b = client_for(api_server, new_key("a")), client_for(api_server, new_key("b"))
    batch = a.post("/v1/batches", json={"items": [{"text": "Mine."}, {"text": "Also mine."}]}).json()
    job = a.post("/v1/jobs", json={"text": "My job."}).json()
    lexicon = a.post("/v1/lexicons", json={"name": "mine", "entries": [{"written": "SQL", "alias": "sequel"}]})
    document = a.post("/v1/documents", files={"file": ("mine.md", b"# Mine\n\n## One\n\nA line of mine.\n")})
    assert lexicon.status_code == 201 and document.status_code == 201, (lexicon.text, document.text)
    ids = {
        "batch_id": batch["id"],
        "job_id": job["id"],
        "ref": lexicon.json()["id"],
        "document_id": document.json()["id"],
        "name": "chapters.json",
    }

    for method, template in _id_routes(api_settings, redis_url):
        names = [p.strip("{}") for p in template.split("/") if p.startswith("{")]
        missing = [n for n in names if n not in ids]
        assert not missing, f"{method} {template}: add an id for {missing} to this test"
        path = template.format(**ids)
        # A body that would be valid for its owner: what B is refused is the object, not the request.
        body = (
            {"batch_id": batch["id"]}
            if template.endswith("/apply")
            else {"chapters": [1]}
            if template.endswith("/rerender")
            else {}
        )
        r = b.request(method, path, **({"json": body} if method == "POST" else {}))
        assert r.status_code == 404, f"{method} {path} with another key: {r.status_code} {r.text}"
        assert "not found" in r.json()["detail"]

    # Nothing was cancelled or deleted by B; A still sees everything; B's lists are empty.
    assert a.get(f"/v1/batches/{batch['id']}").json()["counts"]["queued"] == 2
    assert a.get(f"/v1/jobs/{job['id']}").json()["status"] == "queued"
    assert b.get("/v1/batches").json() == {"data": [], "next_cursor": None}
    assert [x["id"] for x in a.get("/v1/batches").json()["data"]] == [batch["id"]]


def test_cli_batches_are_invisible_to_the_api(api_settings, client, database_url):
    sessions = make_sessionmaker(make_engine(database_url))
    with sessions() as s:
        cli_batch = create_batch(
            s,
            api_settings,
            parse_corpus(b"From the CLI.\n", source="c.txt", max_line_chars=100),
            BatchOptions(),
            source="c.txt",
        )
        s.commit()
        job_id = cli_batch.jobs[0].id if cli_batch.jobs else None
    assert client.get(f"/v1/batches/{cli_batch.id}").status_code == 404
    assert client.get("/v1/batches").json()["data"] == []
    if job_id:
        assert client.get(f"/v1/jobs/{job_id}").status_code == 404


def test_requests_without_a_valid_key_are_401(api_server, new_key, database_url):
    anon = client_for(api_server, None)
    for path in ("/v1/batches", "/v1/voices", "/v1/jobs/abc"):
        r = anon.get(path)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert client_for(api_server, "sk_synth_not-a-key").get("/v1/voices").status_code == 401
    # A revoked key stops working at once.
    from pipeline import api_keys

    key = new_key("soon revoked")
    c = client_for(api_server, key)
    assert c.get("/v1/voices").status_code == 200
    with make_sessionmaker(make_engine(database_url))() as s:
        found = api_keys.authenticate(s, key)
        assert api_keys.revoke_key(s, found.id)
        s.commit()
    assert c.get("/v1/voices").status_code == 401
    assert anon.get("/healthz").status_code == 200 and anon.get("/readyz").status_code == 200
