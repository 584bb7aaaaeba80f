"""A document as a batch: one job per paragraph (a long one split at sentences, as a corpus line
is), each job's client id carrying its chapter, paragraph and part, so that assembly puts the audio
back in order from the manifest alone. The document's outline (titles, author, output settings)
is stored beside the batch's audio, where any process that assembles it finds it."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from pipeline.documents.model import Document
from pipeline.errors import InputError
from pipeline.text import split_chunks

# Jobs are rendered lossless; the document's own format is made once, at assembly. 16-bit wav,
# not flac: both are written and read in process (pipeline/audio.py), where flac took an ffmpeg
# process on each side, 80 ms a 12 s job on the worker, inside the gate its task threads store
# through two at a time, and a hundred more for each chapter's decode. It is about twice flac's size
# in the store, until the document is deleted.
JOB_FORMAT = "wav"
ASSEMBLED_FORMATS = ("m4b", "mp3", "wav", "flac")
_CLIENT_ID = re.compile(r"^c(\d{4})-p(\d{5})-s(\d{3})$")


@dataclass(frozen=True)
class Place:
    chapter: int  # 1-based, over the chapters kept
    paragraph: int  # 1-based within the chapter (a read heading is paragraph 1)
    part: int  # 1-based within the paragraph: a long paragraph's sentences, packed


def client_id_for(place: Place) -> str:
    return f"c{place.chapter:04d}-p{place.paragraph:05d}-s{place.part:03d}"


def place_of(client_id: str) -> Place | None:
    m = _CLIENT_ID.match(client_id)
    return Place(*map(int, m.groups())) if m else None


def document_jobs(doc: Document, max_chars: int) -> list[tuple[Place, str]]:
    """Every job's place and text, in reading order. A paragraph over ``max_chars`` splits at
    sentences (then clauses, then words), as a corpus line's chunks do."""
    if len(doc.chapters) > 9999:
        raise InputError(f"the document has {len(doc.chapters):,} chapters; the limit is 9,999")
    jobs: list[tuple[Place, str]] = []
    for c, chapter in enumerate(doc.chapters, start=1):
        spoken = chapter.spoken()
        if len(spoken) > 99_999:
            raise InputError(f"chapter {c} ({chapter.title}) has {len(spoken):,} paragraphs; the limit is 99,999")
        for p, text in enumerate(spoken, start=1):
            parts = split_chunks(text, max_chars)
            if len(parts) > 999:
                raise InputError(f"chapter {c}, paragraph {p} is too long ({len(text):,} characters)")
            jobs.extend((Place(c, p, s), part) for s, part in enumerate(parts, start=1))
    return jobs


@dataclass(frozen=True)
class Pauses:
    """Silence, in seconds, at each boundary: between the parts of a split paragraph, between
    paragraphs (a read heading and the text after it too), and between chapters, at the end of
    each chapter's file but the last's (in m4b and mp3 its last samples open the next chapter's
    file: documents/join.py)."""

    sentence: float
    paragraph: float
    chapter: float


@dataclass(frozen=True)
class Outline:
    """What assembly needs beyond the jobs' audio, stored as JSON at ``outline_key``."""

    title: str
    author: str | None
    chapters: list[str]  # titles, in order
    format: str  # one of ASSEMBLED_FORMATS
    loudness: float  # LUFS every chapter is levelled to
    true_peak: float  # dBTP ceiling
    pauses: Pauses
    cover_key: str | None = None  # an image in the store
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), ensure_ascii=False, indent=1).encode()

    @classmethod
    def from_json(cls, body: bytes) -> Outline:
        raw = json.loads(body)
        return cls(**{**raw, "pauses": Pauses(**raw["pauses"])})


def outline_key(batch_id: str) -> str:
    return f"batches/{batch_id}/document/outline.json"


def cover_key(batch_id: str, extension: str) -> str:
    return f"batches/{batch_id}/document/cover.{extension}"
