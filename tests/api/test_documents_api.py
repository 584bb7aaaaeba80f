"""Documents through the HTTP API: a real server, a real Celery worker with Piper on the CPU, and a
webhook receiver. A two-chapter Markdown file goes in; the worker renders it, assembles it into the
store (again, to the same bytes, when its assembly is lost), and document.finished arrives once;
the files are another key's 404. A chapter rendered again is assembled again, the other chapters'
files unchanged, and document.finished arrives again."""

from datetime import timedelta

import pytest

from synth_testkit.faults import RedisProcess
from synth_testkit.webhook_receiver import Receiver
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.db.models import utcnow
from pipeline.documents.stored import assemble_to_store, file_key, unassembled
from pipeline.routing import VERIFY_QUEUE
from pipeline.storage import make_store
from tests.api.conftest import _wait_status, client_for, serve
from tests.conftest import free_port
from tests.documents import markdown_book
from tests.test_documents_e2e import chapter_marks
from tests.workers import app_with_worker
from worker.app import default_queues

BOOK = markdown_book(
    "Two Rooms", [("The Kitchen", ["The kettle sang. Bread was warm."]), ("The Garden", ["Bees hummed in the roses."])]
)


@pytest.fixture
def api_settings(settings):
    return settings.with_overrides(
        api_rate_limit=0, webhook_allow_hosts=("127.0.0.0/8",), webhook_retry_schedule=(0.2, 0.4, 0.8)
    )


@pytest.fixture
def running_worker(api_settings, redis_url, piper_engine):
    """A CPU worker's queues: its own (webhooks among them), then the verify queue, where the
    assembly runs."""
    with app_with_worker(api_settings, redis_url, piper_engine, [*default_queues(api_settings), VERIFY_QUEUE]) as app:
        yield app


def wait_document(client, document_id: str, timeout: float = 180) -> dict:
    return _wait_status(client, f"/v1/documents/{document_id}", ("finished", "failed", "cancelled"), timeout, 0.2)


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)  # the path is the same on SQLite
def test_a_document_is_rendered_assembled_once_and_served_to_its_owner(
    api_server, new_key, running_worker, api_settings, tmp_path
):
    with client_for(api_server, new_key("a")) as a, client_for(api_server, new_key("b")) as b:
        secret = a.get("/v1/webhooks/secret").json()["secret"]
        with Receiver(secrets=[secret]) as receiver:
            r = a.post(
                "/v1/documents",
                files={"file": ("rooms.md", BOOK.encode())},
                data={
                    "format": "m4b",
                    "author": "Ann Writer",
                    "webhook_url": receiver.url,
                    "webhook_events": ["document.finished"],
                },
            )
            assert r.status_code == 201, r.text
            created = r.json()
            assert created["title"] == "Two Rooms" and created["format"] == "m4b"
            assert [c["title"] for c in created["chapters"]] == ["The Kitchen", "The Garden"]
            doc = wait_document(a, created["id"])
            assert doc["status"] == "finished", doc
            got = receiver.wait_for(1)
            assert [g.body.count(b'"document.finished"') for g in got] == [1]
            store = make_store(api_settings)
            whole = store.get(file_key(doc["id"], "Two_Rooms.m4b"))

            # An assembly whose message was lost, or cut short before chapters.json: the sweep
            # finds it, and it runs again to the same bytes, with no second event.
            for name in ("chapters.json", "Two_Rooms.m4b"):
                store.delete(file_key(doc["id"], name))
            assert a.get(f"/v1/documents/{doc['id']}").json()["status"] == "assembling"
            engine = make_engine(api_settings.sqlalchemy_url)
            with make_sessionmaker(engine)() as session:
                assert unassembled(session, store, since=utcnow() - timedelta(hours=1)) == [doc["id"]]
            engine.dispose()
            assert a.post(f"/v1/documents/{doc['id']}/assemble").status_code == 202
            assert wait_document(a, doc["id"])["files"] == doc["files"]
            assert store.get(file_key(doc["id"], "Two_Rooms.m4b")) == whole
            assert len(receiver.wait_for(1)) == 1 and receiver.accepted_ids()[got[0].webhook_id] == 1
            assert len(a.get("/v1/webhooks/deliveries").json()["data"]) == 1  # one event, by its id

        assert doc["file_url"] == f"/v1/documents/{doc['id']}/files/Two_Rooms.m4b"
        assert [c["done"] for c in doc["chapters"]] == [c["jobs"] for c in doc["chapters"]]
        assert all(c["file_url"] for c in doc["chapters"]) and doc["chapters"][1]["start_s"] > 0
        assert set(doc["files"]) >= {"Two_Rooms.m4b", "chapters.json"} and len(doc["files"]) == 4
        served = a.get(doc["file_url"], params={"redirect": False})
        assert served.status_code == 200 and served.headers["content-type"] == "audio/mp4"
        assert served.content == whole
        path = tmp_path / "whole.m4b"
        path.write_bytes(whole)
        assert [title for title, _, _ in chapter_marks(path)] == ["The Kitchen", "The Garden"]
        assert a.get(doc["chapters_url"]).json()["chapters"][1]["title"] == "The Garden"

        # Another run of the assembly (a redelivered message) finds the files there and writes nothing.
        engine = make_engine(api_settings.sqlalchemy_url)
        with make_sessionmaker(engine)() as session:
            again, wrote = assemble_to_store(session, store, doc["id"])
        engine.dispose()
        assert not wrote and again["files"] == doc["files"]
        assert a.post(f"/v1/documents/{doc['id']}/assemble").status_code == 409

        for method, path in [
            ("GET", ""),
            ("GET", "/files/chapters.json"),
            ("POST", "/cancel"),
            ("POST", "/assemble"),
            ("DELETE", ""),
        ]:
            assert b.request(method, f"/v1/documents/{doc['id']}{path}").status_code == 404
        assert a.get(f"/v1/documents/{doc['id']}/files/..%2Foutline.json").status_code == 404
        assert a.delete(f"/v1/documents/{doc['id']}").json()["objects_removed"] >= 8
        assert a.get(f"/v1/documents/{doc['id']}").status_code == 404
        assert not store.exists(file_key(doc["id"], "Two_Rooms.m4b"))


THREE = markdown_book(
    "Three Rooms",
    [
        ("The Kitchen", ["The kettle sang."]),
        ("The Garden", ["Bees hummed."]),
        ("The Attic", ["Dust lay on the trunks."]),
    ],
)


def files_of(client, doc: dict) -> dict[int, bytes]:
    """Each chapter's file by number, and the whole file as 0."""
    urls = {0: doc["file_url"], **{c["number"]: c["file_url"] for c in doc["chapters"]}}
    return {n: client.get(url, params={"redirect": False}).content for n, url in urls.items()}


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_chapter_rendered_again_is_assembled_again_with_the_other_chapters_unchanged(
    api_server, new_key, running_worker
):
    with client_for(api_server, new_key("a")) as a, client_for(api_server, new_key("b")) as b:
        with Receiver(secrets=[a.get("/v1/webhooks/secret").json()["secret"]]) as receiver:
            created = a.post(
                "/v1/documents",
                files={"file": ("rooms.md", THREE.encode())},
                data={"format": "mp3", "webhook_url": receiver.url, "webhook_events": ["document.finished"]},
            ).json()
            path = f"/v1/documents/{created['id']}"
            doc = wait_document(a, created["id"])
            assert doc["status"] == "finished", doc
            before = files_of(a, doc)

            # Refused, with nothing written: the document stays assembled, no job queued.
            for chapters, code, reason in [
                ([4], 400, "there is no chapter 4"),
                ([0], 422, "greater than"),
                ([], 422, "at least 1"),
                (["2"], 422, "integer"),
            ]:
                r = a.post(f"{path}/rerender", json={"chapters": chapters})
                assert r.status_code == code and reason in r.text, (chapters, r.text)
            assert b.post(f"{path}/rerender", json={"chapters": [2]}).status_code == 404
            assert a.get(path).json()["status"] == "finished"

            r = a.post(f"{path}/rerender", json={"chapters": [2, 2]})
            assert r.status_code == 202, r.text
            (chapter,) = r.json()["chapters"]
            assert (chapter["number"], chapter["title"], chapter["jobs"], r.json()["queued"]) == (2, "The Garden", 2, 2)
            busy = a.post(f"{path}/rerender", json={"chapters": [1]})
            assert busy.status_code == 409 and "still rendering" in busy.text
            again = wait_document(a, created["id"])
            assert again["status"] == "finished" and again["files"] == doc["files"] and len(again["chapters"]) == 3
            after = files_of(a, again)
            assert [before[n] == after[n] for n in (0, 1, 2, 3)] == [False, True, False, True]

            items = a.get(f"/v1/batches/{created['id']}/items").json()["data"]
            assert {i["client_id"][:5]: i["seed"] for i in items} == {
                "c0001": None,
                "c0002": chapter["seed"],
                "c0003": None,
            }
            assert all(i["status"] == "done" for i in items) and again["batch"]["counts"]["done"] == 6
            got = receiver.wait_for(2)
            assert len({g.webhook_id for g in got}) == 2
            assert all(b'"document.finished"' in g.body for g in got)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "files, data, reason",
    [
        ({"file": ("book.pdf", b"%PDF-1.4")}, {}, ".md, .txt or .epub"),
        ({"file": ("book.md", b"   \n")}, {}, "empty"),
        ({"file": ("book.epub", b"PK\x03\x04 not a zip")}, {}, "book.epub"),
        ({"file": ("book.md", b"\xff\xfe# Title")}, {}, "UTF-8"),
        ({"file": ("book.md", BOOK.encode())}, {"format": "ogg"}, "format"),
        ({"file": ("book.md", BOOK.encode()), "cover": ("c.gif", b"GIF89a")}, {}, "JPEG or PNG"),
        ({"file": ("book.md", BOOK.encode())}, {"voice": "nobody"}, "voice"),
        ({"file": ("book.md", BOOK.encode())}, {"webhook_events": ["document.finished"]}, "webhook_url"),
    ],
)
def test_bad_uploads_are_a_clear_4xx_and_create_nothing(client, files, data, reason):
    r = client.post("/v1/documents", files=files, data=data)
    assert 400 <= r.status_code < 500 and reason in r.text, r.text
    assert client.get("/v1/batches").json()["data"] == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_documents_need_a_key_and_a_batch_is_no_document(api_server, client):
    with client_for(api_server, None) as anonymous:
        assert anonymous.post("/v1/documents", files={"file": ("b.md", BOOK.encode())}).status_code == 401
    batch = client.post("/v1/batches", json={"items": [{"text": "Hi."}]}).json()
    assert client.get(f"/v1/documents/{batch['id']}").status_code == 404
    assert client.get("/v1/documents/not-an-id").status_code == 404


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_upload_the_broker_cannot_take_leaves_nothing_behind(api_settings, new_key, tmp_path):
    redis = RedisProcess(tmp_path / "redis", free_port())
    with redis, serve(api_settings, redis.url) as server, client_for(server, new_key()) as c:
        redis.kill()
        r = c.post("/v1/documents", files={"file": ("rooms.md", BOOK.encode()), "cover": ("c.png", b"\x89PNG....")})
        assert r.status_code == 503, r.text
        assert c.get("/v1/batches").json()["data"] == []
    assert make_store(api_settings).list("batches/") == []  # no outline, no cover
