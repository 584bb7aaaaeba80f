"""Documents in (Markdown, plain text, EPUB): chapters of paragraphs, rendered as one batch and
assembled into one file with chapter marks (pipeline/documents/assemble.py)."""

from __future__ import annotations

from pathlib import PurePath

from pipeline.corpus import check_no_nul
from pipeline.documents.model import Chapter, Document
from pipeline.errors import InputError

__all__ = ["Chapter", "Document", "DOCUMENT_KINDS", "kind_for", "read_document"]

DOCUMENT_KINDS = ("markdown", "text", "epub")
_EXTENSIONS = {".md": "markdown", ".markdown": "markdown", ".epub": "epub"}


def kind_for(path: str) -> str | None:
    """The document kind a file name says (a .txt file is a corpus unless asked otherwise)."""
    return _EXTENSIONS.get(PurePath(path).suffix.lower())


def read_document(data: bytes, kind: str, *, source: str, max_bytes: int) -> Document:
    """Parse a whole document; InputError with a one-line reason for anything that cannot be read."""
    if kind not in DOCUMENT_KINDS:
        raise InputError(f"unknown document kind {kind!r}; choose one of {', '.join(DOCUMENT_KINDS)}")
    if len(data) > max_bytes:
        raise InputError(
            f"{source}: {len(data):,} bytes; the limit for a document is {max_bytes:,} (SYNTH_MAX_DOCUMENT_BYTES)"
        )
    if not data.strip():
        raise InputError(f"{source}: the document is empty")
    if kind == "epub":
        from pipeline.documents.epub import read_epub

        return read_epub(data, source=source)
    check_no_nul(data, source)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"{source}: not UTF-8 text (bad byte 0x{data[e.start]:02x} on line {line})") from e
    if kind == "markdown":
        from pipeline.documents.markdown import read_markdown

        return read_markdown(text, source=source)
    from pipeline.documents.plaintext import read_plain_text

    return read_plain_text(text, source=source)
