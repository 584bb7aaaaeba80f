"""Encoded chapters kept in the store beside the batch's audio, so that each is encoded once: by a
worker as soon as its last job is done, while the rest of the document renders, then found by the
assembly of the whole, by a second assembly (`synth assemble` again, a redelivered message) and,
for every chapter a rerender left alone, by the assembly after it.

A chapter's objects are named by a digest of what its audio is made from: the outline's settings
that reach it, and each of its jobs' audio as the manifest records it (object, attempts, renders,
length, level, seed, lexicon, captions). A chapter rendered again, a retake kept, another format
or loudness make another digest, so what is found is never stale, only unused, and the assembly
of the whole removes the digests of audio the jobs no longer have, keeping each format's of the
audio they have. Each object is written whole (the store's put is atomic) and the chapter's JSON
last: a chapter is cached once its JSON is there.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path

from pipeline.documents.chapter import CODECS, ChapterAudio
from pipeline.documents.join import PIECE_FORMAT
from pipeline.documents.plan import Outline
from pipeline.storage import ObjectStore

# Raised whenever the encoding changes (codec settings, levelling, parts), so that no chapter
# encoded the old way is found.
ENCODING_VERSION = 2
# The manifest's record of a job's audio: a new render, a retake kept or a new seed changes one.
_AUDIO_FIELDS = (
    "client_id",
    "object_key",
    "attempts",
    "renders",
    "duration_s",
    "loudness_lufs",
    "true_peak_dbtp",
    "seed",
    "lexicon_id",
    "lexicon_version",
    "captions",
)


def chapters_prefix(batch_id: str) -> str:
    return f"batches/{batch_id}/document/chapters/"


def chapter_digest(outline: Outline, n: int, lines: list[dict]) -> str:
    """The digest of chapter ``n`` from the outline and its jobs' manifest lines."""
    body = {
        "version": ENCODING_VERSION,
        "format": outline.format,
        "loudness": outline.loudness,
        "true_peak": outline.true_peak,
        "pauses": asdict(outline.pauses),
        "title": outline.title,
        "author": outline.author,
        "chapter": n,
        "chapters": len(outline.chapters),
        "chapter_title": outline.chapters[n - 1],
        "jobs": [[line.get(k) for k in _AUDIO_FIELDS] for line in sorted(lines, key=lambda line: line["client_id"])],
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]


def _key(batch_id: str, n: int, digest: str, suffix: str) -> str:
    return f"{chapters_prefix(batch_id)}{n:04d}-{digest}.{suffix}"


def is_cached(store: ObjectStore, batch_id: str, n: int, digest: str) -> bool:
    return store.exists(_key(batch_id, n, digest, "json"))


def length(store: ObjectStore, batch_id: str, n: int, digest: str) -> tuple[int, int] | None:
    """Chapter ``n``'s (rate, samples) as cached under ``digest``; None if it is not."""
    key = _key(batch_id, n, digest, "json")
    if not store.exists(key):
        return None
    meta = json.loads(store.get(key))
    return meta["rate"], meta["samples"]


def load(store: ObjectStore, batch_id: str, n: int, digest: str, folder: Path) -> ChapterAudio | None:
    """Chapter ``n`` as cached under ``digest``, its files written into ``folder``; None if it is not."""
    key = _key(batch_id, n, digest, "json")
    if not store.exists(key):
        return None
    meta = json.loads(store.get(key))
    file = folder / meta["name"]
    store.get_file(_key(batch_id, n, digest, meta["extension"]), file)
    segment = None
    if meta["segment"]:
        segment = folder / f"{n:04d}.segment.{meta['segment']}"
        store.get_file(_key(batch_id, n, digest, f"segment.{meta['segment']}"), segment)
    return ChapterAudio(
        n,
        meta["name"],
        meta["rate"],
        meta["samples"],
        meta["gain_db"],
        meta["limited"],
        file,
        segment,
        [(offset, words) for offset, words in meta["spans"]],
    )


def save(store: ObjectStore, batch_id: str, outline: Outline, digest: str, chapter: ChapterAudio) -> None:
    n, codec = chapter.number, CODECS[outline.format]
    store.put_file(_key(batch_id, n, digest, codec.extension), chapter.file, "application/octet-stream")
    piece = None
    if chapter.segment is not None:
        piece = PIECE_FORMAT[outline.format]
        store.put_file(_key(batch_id, n, digest, f"segment.{piece}"), chapter.segment, "application/octet-stream")
    meta = {
        "name": chapter.name,
        "extension": codec.extension,
        "segment": piece,
        "rate": chapter.rate,
        "samples": chapter.samples,
        "gain_db": chapter.gain_db,
        "limited": chapter.limited,
        "spans": chapter.spans,
    }
    store.put(_key(batch_id, n, digest, "json"), json.dumps(meta, ensure_ascii=False).encode(), "application/json")


def prune(store: ObjectStore, batch_id: str, outline: Outline, by_chapter: dict[int, list[dict]]) -> None:
    """Remove every cached chapter object but those of the chapters as they are now (``by_chapter``:
    chapter -> its jobs' manifest lines), in every format: an assembly in another format (`synth
    assemble --format`) leaves this one's chapters to be found again."""
    prefix = chapters_prefix(batch_id)
    wanted = {
        f"{n:04d}-{chapter_digest(replace(outline, format=fmt), n, by_chapter.get(n, []))}"
        for n in range(1, len(outline.chapters) + 1)
        for fmt in CODECS
    }
    for key in store.list(prefix):
        if key[len(prefix) :].split(".", 1)[0] not in wanted:
            store.delete(key)
