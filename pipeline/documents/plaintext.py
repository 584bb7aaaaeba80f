"""Plain text in, with one heading convention (docs/input.md, "Documents"):

- paragraphs are separated by blank lines; the lines of one paragraph are joined (hard-wrapped
  text reads as it should);
- the first paragraph is the title when it is one short line and the next paragraph is a chapter
  heading;
- a chapter heading is a paragraph of one short line that starts with Chapter, Part, Book,
  Prologue, Epilogue, Preface, Foreword, Introduction, Interlude or Afterword (any case), as
  Project Gutenberg's texts and most manuscripts write them: "CHAPTER IV.", "Chapter 2: The Road".

Without a chapter heading the whole text is one chapter. A line is short at MAX_TITLE_CHARS and
under; a heading's final full stop is kept, since "CHAPTER IV." is common.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from pipeline.documents.model import MAX_TITLE_CHARS, Chapter, Document, finish, paragraph

HEADING_WORDS = (
    "chapter",
    "part",
    "book",
    "prologue",
    "epilogue",
    "preface",
    "foreword",
    "introduction",
    "interlude",
    "afterword",
)
_HEADING = re.compile(r"^(?:%s)\b" % "|".join(HEADING_WORDS), re.I)


def is_heading(block: list[str]) -> bool:
    return (
        len(block) == 1
        and len(block[0]) <= MAX_TITLE_CHARS
        and _HEADING.match(block[0]) is not None
        and not block[0].rstrip().endswith(("?", "!", ",", ";"))
    )


def read_plain_text(text: str, *, source: str) -> Document:
    blocks = _paragraphs(text.splitlines())
    title = None
    first, second = next(blocks, None), next(blocks, None)
    pending = [b for b in (first, second) if b is not None]
    if (
        first
        and second
        and len(first) == 1
        and len(first[0]) <= MAX_TITLE_CHARS
        and not is_heading(first)
        and is_heading(second)
    ):
        title = first[0]
        pending = [second]
    chapters: list[Chapter] = []
    for block in _chain(pending, blocks):
        if is_heading(block):
            chapters.append(Chapter(title=block[0], read_title=True))
            continue
        if not chapters:
            chapters.append(Chapter(title=title or "Opening"))
        if (said := paragraph(" ".join(block))) is not None:
            chapters[-1].paragraphs.append(said)
    return finish(title, None, chapters, source)


def _paragraphs(lines: Iterable[str]) -> Iterator[list[str]]:
    block: list[str] = []
    for line in lines:
        if line.strip():
            block.append(line.strip())
        elif block:
            yield block
            block = []
    if block:
        yield block


def _chain(first: list[list[str]], rest: Iterable[list[str]]) -> Iterable[list[str]]:
    yield from first
    yield from rest
