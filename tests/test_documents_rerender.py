"""`synth rerender DOC --chapter N` as a user runs it (embedded, Piper on the CPU): the chapter's
jobs render again with a new seed, recorded in the manifest, and the document is assembled again
with the other chapters' files the same bytes; a request the document cannot take exits 2 and
writes nothing."""

import hashlib
import json

import pytest

from pipeline.documents import read_document
from pipeline.documents.batch import create_document_batch, plan_outline
from pipeline.documents.rerender import DocumentBusyError, plan
from pipeline.storage import make_store
from pipeline.submit import BatchOptions
from tests.cli_helpers import synth, synth_env
from tests.documents import CHAPTERS, markdown_book
from tests.test_documents_e2e import chapter_marks

TITLES = [t for t, _ in CHAPTERS]


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    """The three-chapter book, rendered and assembled as m4b into ``first``."""
    root = tmp_path_factory.mktemp("rerender")
    env = synth_env(SYNTH_DATA_DIR=str(root / "data"))
    (root / "voyage.md").write_text(markdown_book())
    done = synth("submit", str(root / "voyage.md"), "--name", "voyage", "-o", str(root / "first"), env=env, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    return root, env


@pytest.mark.slow
def test_a_chapter_rendered_again_changes_only_its_file_and_records_its_new_seed(book):
    root, env = book
    done = synth("rerender", "voyage", "--chapter", "2", "-o", str(root / "second"), env=env, timeout=300)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "chapter 2 (The Storm): 2 jobs queued again with seed" in stderr and "chapter 2/3 rendered" in stderr
    first, second = (sorted((root / f).glob("00*.m4a")) for f in ("first", "second"))
    assert [p.name for p in first] == [p.name for p in second] and len(first) == 3
    assert [digest(a) == digest(b) for a, b in zip(first, second)] == [True, False, True]
    whole = root / "second" / "A_Short_Voyage.m4b"
    assert digest(whole) != digest(root / "first" / "A_Short_Voyage.m4b")
    assert [title for title, _, _ in chapter_marks(whole)] == TITLES
    assert len(json.loads((root / "second" / "chapters.json").read_text())["chapters"]) == 3

    before, after = manifest(root / "first"), manifest(root / "second")
    assert [line["seed"] for line in before] == [None] * 7
    seeds = {line["client_id"][:5]: line["seed"] for line in after}
    assert seeds["c0001"] is None and seeds["c0003"] is None and isinstance(seeds["c0002"], int)
    assert {line["seed"] for line in after if line["client_id"].startswith("c0002")} == {seeds["c0002"]}
    assert all(line["status"] == "done" for line in after) and len(after) == 7
    status = json.loads(synth("status", "voyage", "--json", env=env).stdout)
    assert status["counts"]["done"] == status["total"] == 7 and status["reused"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, reason",
    [
        (["voyage", "--chapter", "4"], "there is no chapter 4"),
        (["voyage", "--chapter", "0"], "there is no chapter 0"),
        (["voyage", "--chapter", "two"], "'two' is not a valid integer"),
        (["no-such-book", "--chapter", "1"], "no batch 'no-such-book'"),
        (["voyage"], "Missing option '--chapter'"),
    ],
)
def test_a_chapter_the_document_cannot_render_again_exits_2_and_writes_nothing(book, args, reason):
    root, env = book
    done = synth("rerender", *args, "-o", str(root / "refused"), env=env)
    assert done.returncode == 2 and reason in done.stderr.decode(), done.stderr.decode()
    assert not (root / "refused").exists()
    status = json.loads(synth("status", "voyage", "--json", env=env).stdout)
    assert status["counts"]["done"] == status["total"] == 7


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_document_still_rendering_is_refused(settings, sessions):
    doc = read_document(markdown_book().encode(), "markdown", source="voyage.md", max_bytes=10**6)
    outline = plan_outline(settings, doc, fmt="m4b", title=None, author=None, fallback_title="voyage")
    store = make_store(settings)
    with sessions() as s:
        batch = create_document_batch(s, store, settings, doc, outline, BatchOptions(), source="voyage.md")
        s.commit()
        with pytest.raises(DocumentBusyError, match="still rendering"):
            plan(s, store, batch.id, [2])
