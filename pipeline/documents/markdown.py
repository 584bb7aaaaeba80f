"""Markdown in: headings make the title and chapters, blank lines the paragraphs.

A lone top-level heading is the title and the next level down makes the chapters; with several
top-level headings (or none), the highest level there is makes the chapters. Deeper headings are
read as paragraphs of their chapter. Code blocks, images, link targets and HTML comments are not
read; emphasis marks are dropped and a link reads as its text. One pass over the lines, so a
large file costs time and memory in proportion to its size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pipeline.documents.model import MAX_TITLE_CHARS, Chapter, Document, finish, paragraph

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_LIST_ITEM = re.compile(r"^ {0,3}(?:[-+*]|\d{1,9}[.)])[ \t]+")
_QUOTE = re.compile(r"^ {0,3}(?:>[ \t]?)+")
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*\S+")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)|!\[([^\]]*)\]\[[^\]]*\]")
_LINK = re.compile(r"\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_EMPHASIS = re.compile(r"(\*{1,3}|_{1,3}|~~)(?=\S)(.+?)(?<=\S)\1")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!>~|])")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")

Block = tuple[int, str]  # (heading level, or 0 for a paragraph; its text)


def read_markdown(text: str, *, source: str) -> Document:
    blocks = list(_blocks(text.splitlines()))
    levels = [level for level, _ in blocks if level]
    top = min(levels, default=0)
    title = None
    if top and levels.count(top) == 1 and blocks[0][0] == top and len(set(levels)) > 1:
        title = blocks[0][1]  # a lone top-level heading, first: the title
        blocks = blocks[1:]
        top = min(level for level, _ in blocks if level)
    chapters: list[Chapter] = []
    for level, body in blocks:
        if level == top:
            chapters.append(Chapter(title=body or f"Chapter {len(chapters) + 1}", read_title=bool(body)))
            continue
        if not chapters:  # text before the first chapter: an opening of its own
            chapters.append(Chapter(title=title or "Opening"))
        if (said := paragraph(body)) is not None:
            chapters[-1].paragraphs.append(said)
    return finish(title, None, chapters, source)


def _blocks(lines: Iterable[str]) -> Iterable[Block]:
    """Headings and paragraphs in order, their inline markup read as text."""
    buffer: list[str] = []
    fence: str | None = None
    in_comment = False

    def flush() -> Iterable[Block]:
        if buffer:
            yield 0, _inline(" ".join(buffer))
            buffer.clear()

    for line in lines:
        if fence is not None:  # a code block is not read aloud
            if line.strip().startswith(fence):
                fence = None
            continue
        if in_comment:
            in_comment = "-->" not in line
            continue
        if line.lstrip().startswith("<!--") and "-->" not in line:
            yield from flush()
            in_comment = True
            continue
        if m := _FENCE.match(line):
            yield from flush()
            fence = m.group(1)[0] * 3
            continue
        if (
            not line.strip()
            or (_RULE.match(line) and not buffer)
            or _REF_DEF.match(line)
            or ("|" in line and _TABLE_RULE.match(line))
        ):
            yield from flush()
            continue
        if m := _ATX.match(line):
            yield from flush()
            yield len(m.group(1)), _inline(m.group(2) or "")[:MAX_TITLE_CHARS]
            continue
        if (m := _SETEXT.match(line)) and len(buffer) == 1:
            yield (1 if m.group(1)[0] == "=" else 2), _inline(buffer.pop())[:MAX_TITLE_CHARS]
            continue
        if _RULE.match(line):
            yield from flush()
            continue
        if _LIST_ITEM.match(line) or line.lstrip().startswith("|"):  # an item or table row: a paragraph
            yield from flush()
            line = _LIST_ITEM.sub("", line, count=1)
        buffer.append(_QUOTE.sub("", line).strip().strip("|"))
    yield from flush()


def _inline(text: str) -> str:
    text = _COMMENT.sub("", text)
    text = _CODE_SPAN.sub(lambda m: m.group(2).strip(), text)
    text = _IMAGE.sub("", text)
    text = _LINK.sub(r"\1", text)
    text = _AUTOLINK.sub(r"\1", text)
    for _ in range(3):  # nested emphasis: ***a** b*
        text = _EMPHASIS.sub(r"\2", text)
    text = text.replace(" | ", ", ")  # a table row reads as a list
    return _ESCAPE.sub(r"\1", text).strip()
