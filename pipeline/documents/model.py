"""A document as synth reads it: a title, an author, and chapters of paragraphs."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.text import has_speakable_content, normalize

# A chapter heading past this is no heading: a paragraph that happens to start a file.
MAX_TITLE_CHARS = 200


@dataclass
class Chapter:
    title: str
    paragraphs: list[str] = field(default_factory=list)  # as written, whitespace folded
    # Whether the title is read aloud before the paragraphs: a Markdown or plain-text heading is
    # (the listener hears where a chapter starts); an EPUB's heading is in its XHTML already.
    read_title: bool = False

    def spoken(self) -> list[str]:
        """What is read, in order: the heading where it is read, then the paragraphs."""
        return ([self.title] if self.read_title and paragraph(self.title) else []) + self.paragraphs


@dataclass
class Document:
    title: str | None
    author: str | None
    chapters: list[Chapter]
    # Chapters left out for having nothing to say (a cover image, a blank page), by title: the
    # caller says so, so nothing is dropped silently.
    skipped: list[str] = field(default_factory=list)

    @property
    def paragraphs(self) -> int:
        return sum(len(c.paragraphs) for c in self.chapters)


def paragraph(text: str) -> str | None:
    """A paragraph's text with whitespace folded, or None where it says nothing."""
    text = normalize(text)
    return text if has_speakable_content(text) else None


def finish(title: str | None, author: str | None, chapters: list[Chapter], source: str) -> Document:
    """Drop the chapters with nothing to say (recorded in ``skipped``), and refuse a document left
    with none (InputError)."""
    from pipeline.errors import InputError

    kept = [c for c in chapters if c.paragraphs]
    skipped = [c.title for c in chapters if not c.paragraphs]
    if not kept:
        raise InputError(
            f"{source}: no speakable text in the document"
            + (f" ({len(skipped)} chapters, all empty)" if skipped else "")
        )
    return Document(title=title, author=author, chapters=kept, skipped=skipped)
