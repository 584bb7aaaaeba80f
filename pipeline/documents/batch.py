"""A document's batch in the store and the database: written with its outline (and cover) beside
it, and assembled from its jobs' audio once they are done."""

from __future__ import annotations

import json
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.orm import Session

from pipeline import loudness
from pipeline.db import jobs as db
from pipeline.db.models import Batch
from pipeline.documents import cache
from pipeline.documents.assemble import Assembled, assemble
from pipeline.documents.chapter import ChapterAudio, Piece, chapter_length, encode_chapter
from pipeline.documents.model import Document
from pipeline.documents.plan import (
    ASSEMBLED_FORMATS,
    JOB_FORMAT,
    Outline,
    Pauses,
    client_id_for,
    cover_key,
    document_jobs,
    outline_key,
    place_of,
)
from pipeline.errors import InputError, PermanentError
from pipeline.manifest import manifest_lines
from pipeline.routing import REALTIME_QUEUE
from pipeline.settings import Settings
from pipeline.storage import ObjectStore
from pipeline.submit import BatchOptions, Item, plan_item_batch
from pipeline.verify.jobs import caption_key


def plan_outline(
    settings: Settings,
    doc: Document,
    *,
    fmt: str,
    title: str | None,
    author: str | None,
    fallback_title: str,
    loudness_target: float | None = None,
    true_peak: float | None = None,
) -> Outline:
    """The outline to store: what the command line (or request) says over what the document says."""
    if fmt not in ASSEMBLED_FORMATS:
        raise InputError(f"a document is assembled as {', '.join(ASSEMBLED_FORMATS)}, not {fmt!r}")
    target = settings.document_loudness if loudness_target is None else loudness_target
    loudness.check_target(target, true_peak)
    return Outline(
        title=title or doc.title or fallback_title,
        author=author or doc.author,
        chapters=[c.title for c in doc.chapters],
        format=fmt,
        loudness=target,
        true_peak=loudness.DEFAULT_CEILING_DBTP if true_peak is None else true_peak,
        pauses=Pauses(settings.pause_sentence, settings.pause_paragraph, settings.pause_chapter),
        skipped=list(doc.skipped),
    )


def create_document_batch(
    session: Session,
    store: ObjectStore,
    settings: Settings,
    doc: Document,
    outline: Outline,
    options: BatchOptions,
    *,
    source: str,
    cover: bytes | None = None,
    **batch_columns,
) -> Batch:
    """The batch of a document's jobs, rendered lossless (JOB_FORMAT), with its outline stored
    beside it. Validated before anything is written; the caller commits (and withdraws the batch,
    objects included, if what follows fails)."""
    items = [
        Item(text=text, client_id=client_id_for(place)) for place, text in document_jobs(doc, settings.max_line_chars)
    ]
    opts = BatchOptions(
        voice=options.voice,
        format=JOB_FORMAT,
        sample_rate=options.sample_rate,
        priority=options.priority,
        name=options.name,
        lexicon=options.lexicon,
    )
    planned = plan_item_batch(settings, items, opts, source=source, **batch_columns)
    in_book_order(planned)
    if cover is not None and not cover.startswith((b"\x89PNG", b"\xff\xd8")):
        raise InputError("the cover must be a JPEG or PNG image")
    batch = db.insert_batch(session, planned)
    if cover is not None:
        key = cover_key(batch.id, "png" if cover.startswith(b"\x89PNG") else "jpg")
        store.put(key, cover, "image/png" if key.endswith("png") else "image/jpeg")
        outline = Outline(**{**outline.__dict__, "cover_key": key})
    store.put(outline_key(batch.id), outline.to_json(), "application/json")
    return batch


def in_book_order(planned: db.PlannedBatch) -> None:
    """Every job of a document on one queue, the length bucket most of them fall in, so the
    workers take them in the book's order. A chapter is encoded once its last job is done
    (ahead.py), and workers drain the longest bucket first (SYNTH_BUCKET_ORDER): with its jobs
    over several buckets, every chapter waited for the last one drained, which holds the short
    pieces and headings. On one H200, 17 of a 100,000-word book's 30 chapters ended in the
    render's last tenth, and their encoding made the assembly a fifth of the render. In one
    queue the chapters end one after another and are encoded while the rest render; the engine
    batches pieces of any length together, so the buckets' grouping is not needed within one
    batch."""
    queues = Counter(row["queue"] for row in planned.jobs)
    if not queues or REALTIME_QUEUE in queues:
        return  # a realtime document's jobs are each a message of their own, in order already
    queue = queues.most_common(1)[0][0]
    for row in planned.jobs:
        row["queue"] = queue


def load_outline(store: ObjectStore, batch_id: str) -> Outline:
    key = outline_key(batch_id)
    if not store.exists(key):
        raise InputError(f"batch {batch_id} is not a document (it has no outline)")
    return Outline.from_json(store.get(key))


def assemble_batch(
    session: Session,
    store: ObjectStore,
    batch_id: str,
    output: Path,
    *,
    fmt: str | None = None,
    ready: Callable[[int], None] | None = None,
) -> Assembled:
    """Assemble a finished document batch into ``output``. Refused while any job is not done:
    a document with a hole in it is no document. Chapters cached under their digest are taken
    as they are; the others are encoded and cached (pipeline/documents/cache.py). ``ready(n)``
    returns once chapter ``n`` is in the cache, or will not be, where another thread encodes
    the chapters (ahead.py): the whole file is then joined as they come, its chapter marks
    taken from the cache and, for the chapters not there yet, from their jobs' lengths."""
    outline = load_outline(store, batch_id)
    if fmt is not None:
        outline = Outline(**{**outline.__dict__, "format": fmt})
    lines = manifest_lines(session, store, batch_id)
    missing = [line["client_id"] for line in lines if line["status"] != "done" or not line["object_key"]]
    if missing:
        raise PermanentError(
            f"batch {batch_id}: {len(missing)} of {len(lines)} jobs are not done "
            f"(first: {missing[0]}); `synth retry` them, then assemble"
        )
    by_chapter = _by_chapter(batch_id, lines)
    digests = {n: cache.chapter_digest(outline, n, by_chapter.get(n, [])) for n in range(1, len(outline.chapters) + 1)}

    def pieces(n: int) -> list[Piece]:
        return [_piece(store, line) for line in by_chapter.get(n, [])]

    def chapter(n: int, folder: Path) -> ChapterAudio:
        if ready is not None:
            ready(n)
        found = cache.load(store, batch_id, n, digests[n], folder)
        if found is None:
            found = encode_chapter(outline, n, pieces(n), folder)
            cache.save(store, batch_id, outline, digests[n], found)
        return found

    def length(n: int) -> tuple[int, int]:
        return cache.length(store, batch_id, n, digests[n]) or chapter_length(outline, n, pieces(n))

    cover = store.get(outline.cover_key) if outline.cover_key else None
    done = assemble(outline, pieces, output, cover=cover, chapters=chapter, lengths=length if ready else None)
    cache.prune(store, batch_id, outline, by_chapter)
    return done


def prepare_chapter(session: Session, store: ObjectStore, batch_id: str, n: int) -> bool:
    """Encode chapter ``n`` of a document into its cache, as soon as its jobs are all done, so the
    assembly of the whole finds it. Returns whether it encoded it: False where it was cached
    already or a job of it is not done."""
    outline = load_outline(store, batch_id)
    lines = _by_chapter(batch_id, manifest_lines(session, store, batch_id)).get(n, [])
    if not lines or any(line["status"] != "done" or not line["object_key"] for line in lines):
        return False
    digest = cache.chapter_digest(outline, n, lines)
    if cache.is_cached(store, batch_id, n, digest):
        return False
    with tempfile.TemporaryDirectory(prefix="synth-chapter-") as tmp:
        made = encode_chapter(outline, n, [_piece(store, line) for line in lines], Path(tmp))
        cache.save(store, batch_id, outline, digest, made)
    return True


def _by_chapter(batch_id: str, lines: list[dict]) -> dict[int, list[dict]]:
    by_chapter: dict[int, list[dict]] = defaultdict(list)
    for line in lines:
        place = place_of(line["client_id"])
        if place is None:
            raise PermanentError(f"batch {batch_id}: job {line['client_id']!r} has no place in the document")
        by_chapter[place.chapter].append({**line, "place": place})
    return by_chapter


def _piece(store: ObjectStore, line: dict) -> Piece:
    """A job's audio and word times, and the true peak its worker measured."""
    return Piece(line["place"], store.get(line["object_key"]), _words(store, line), line.get("true_peak_dbtp"))


def _words(store: ObjectStore, line: dict) -> list[dict] | None:
    if not line.get("captions"):
        return None
    return json.loads(store.get(caption_key(line["object_key"], "json")))["words"]
