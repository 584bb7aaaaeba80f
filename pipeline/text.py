"""Text in: normalization, speech-length estimates, and splitting long text into engine-sized chunks."""

from __future__ import annotations

import re
import unicodedata

from pipeline.constants import CHARS_PER_SECOND

_SPACE = re.compile(r"\s+")
# Sentence ends: . ! ? … followed by space, optionally closed by quotes/brackets. Abbreviations are
# not worth a dictionary here: a split inside "Dr. Smith" costs one short pause.
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+")
_MARKUP = re.compile(r"<[^<>]*>")
_CLAUSE_END = re.compile(r"(?<=[,;:—–])\s+")
_REPLACEMENTS = {
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u00a0": " ",
    "\u2026": "...",
    "\u2013": "-",
    "\u2014": " - ",
}


def normalize(text: str) -> str:
    """NFKC, typographic quotes and dashes to plain ones, control characters dropped, spaces folded."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(_REPLACEMENTS.get(c, c) for c in text)
    text = "".join(c for c in text if c in "\t\n" or unicodedata.category(c)[0] != "C")
    return _SPACE.sub(" ", text).strip()


def estimate_seconds(text: str) -> float:
    """Expected speech length, used for routing into length buckets: markup (an SSML document's
    tags) is not counted as speech."""
    return len(_MARKUP.sub("", text)) / CHARS_PER_SECOND


def has_speakable_content(text: str) -> bool:
    return any(c.isalnum() for c in text)


def split_chunks(text: str, max_chars: int) -> list[str]:
    """Split at sentence ends, then at clause marks, then at spaces, so that each chunk has at most
    ``max_chars`` characters. Consecutive short sentences are packed together."""
    if len(text) <= max_chars:
        return [text] if text else []
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        pieces.extend(_split_long(sentence.strip(), max_chars))
    return _pack([p for p in pieces if p], max_chars)


def _split_long(sentence: str, max_chars: int) -> list[str]:
    if len(sentence) <= max_chars:
        return [sentence]
    clauses = _CLAUSE_END.split(sentence)
    if len(clauses) > 1:
        return [part for clause in clauses for part in _split_long(clause, max_chars)]
    return _split_words(sentence, max_chars)


def _split_words(text: str, max_chars: int) -> list[str]:
    out: list[str] = []
    current = ""
    for word in text.split(" "):
        while len(word) > max_chars:  # one "word" longer than a chunk: cut it hard
            if current:
                out.append(current)
                current = ""
            out.append(word[:max_chars])
            word = word[max_chars:]
        if current and len(current) + 1 + len(word) > max_chars:
            out.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        out.append(current)
    return out


def _pack(pieces: list[str], max_chars: int) -> list[str]:
    out: list[str] = []
    for piece in pieces:
        if out and len(out[-1]) + 1 + len(piece) <= max_chars:
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out
