"""A lexicon version compiled for the text front end, applied in one pass over a text.

Words are found with one scan (``\\w+``); each is looked up in a dict keyed by an entry's first
word (as written, then lower-cased), so the cost is one or two dict lookups per word of the text,
whatever the number of entries. Where an entry's first word matches, the text is compared with
its whole written form there ("New York", "Node.js"); the longest entry wins and matches do not
overlap. Pattern entries are one combined regular expression run over the text between literal
matches; a pattern is a word with at most one ``\\w*`` (entries.py), which matches in time linear
in the word, so no text can make it backtrack badly.

A phoneme entry's IPA cannot go through the rest of the front end as text (NFKC and the script
filter would change it): it becomes a placeholder word here, and ``restore`` puts the IPA back,
in the engine's phoneme syntax (Piper: ``[[ ... ]]``), once the text is cut into chunks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline.lexicon.entries import Entry

_WORD = re.compile(r"\w+")
_PLACEHOLDER = re.compile(r"lexphoneme(\d+)x")  # a word that no later rule of the front end changes


@dataclass
class Applied:
    text: str
    replaced: int = 0  # entries applied
    phonemes: list[str] = field(default_factory=list)  # IPA by placeholder number
    skipped_phonemes: int = 0  # phoneme entries the voice cannot take


@dataclass(frozen=True)
class _Literal:
    offset: int  # characters of the written form before its first word
    written: str
    entry: Entry


class Compiled:
    def __init__(self, entries: list[Entry]) -> None:
        self.size = len(entries)
        self._exact: dict[str, list[_Literal]] = {}
        self._folded: dict[str, list[_Literal]] = {}
        patterns: list[str] = []
        self._pattern_entries: list[Entry] = []
        for e in entries:
            if e.pattern:
                self._pattern_entries.append(e)
                body = _pattern_regex(e.written)
                patterns.append(
                    f"(?P<p{len(patterns)}>{body})" if e.case_sensitive else f"(?P<p{len(patterns)}>(?i:{body}))"
                )
                continue
            first = _WORD.search(e.written)
            assert first is not None  # check_entry refuses a written form without a word
            literal = _Literal(first.start(), e.written if e.case_sensitive else e.written.lower(), e)
            table, key = (self._exact, first.group()) if e.case_sensitive else (self._folded, first.group().lower())
            table.setdefault(key, []).append(literal)
        for table in (self._exact, self._folded):
            for candidates in table.values():
                candidates.sort(key=lambda c: -len(c.written))
        self._patterns = re.compile(r"(?<!\w)(?:" + "|".join(patterns) + r")(?!\w)") if patterns else None

    def apply(self, text: str, takes_phonemes: bool, phonemes: list[str] | None = None) -> Applied:
        """``phonemes``: where the IPA of earlier parts of the same text went, so placeholders of
        one text are numbered once."""
        out = Applied("", phonemes=phonemes if phonemes is not None else [])
        pieces: list[str] = []
        pos = 0
        exact, folded = self._exact, self._folded
        for m in _WORD.finditer(text):
            start = m.start()
            if start < pos:
                continue
            word = m.group()
            hit = _match(text, start, exact.get(word), False) if exact else None
            if hit is None and folded:
                hit = _match(text, start, folded.get(word.lower()), True)
            if hit is None:
                continue
            begin, end, entry = hit
            if begin < pos:
                continue
            pieces.append(self._gaps(text[pos:begin], out, takes_phonemes))
            pieces.append(_say(entry, text[begin:end], out, takes_phonemes))
            pos = end
        pieces.append(self._gaps(text[pos:], out, takes_phonemes))
        out.text = "".join(pieces)
        return out

    def _gaps(self, text: str, out: Applied, takes_phonemes: bool) -> str:
        if self._patterns is None or not text:
            return text

        def sub(m: re.Match) -> str:
            assert m.lastgroup is not None  # every alternative is a named group, p<n>
            entry = self._pattern_entries[int(m.lastgroup[1:])]
            return _say(entry, m.group(), out, takes_phonemes)

        return self._patterns.sub(sub, text)


def _match(text: str, start: int, candidates: list[_Literal] | None, fold: bool):
    if not candidates:
        return None
    for c in candidates:
        begin = start - c.offset
        end = begin + len(c.written)
        if begin < 0 or end > len(text):
            continue
        found = text[begin:end]
        if (found.lower() if fold else found) != c.written:
            continue
        # whole words: no letter or digit runs on past either end of the written form
        if (end < len(text) and c.written[-1:].isalnum() and (text[end].isalnum() or text[end] == "_")) or (
            begin > 0 and c.written[0].isalnum() and (text[begin - 1].isalnum() or text[begin - 1] == "_")
        ):
            continue
        return begin, end, c.entry
    return None


def _say(entry: Entry, found: str, out: Applied, takes_phonemes: bool) -> str:
    if entry.alias is not None:
        out.replaced += 1
        return entry.alias
    if not takes_phonemes:
        out.skipped_phonemes += 1
        return found
    assert entry.phoneme is not None  # an entry has an alias or a phoneme (check_entry)
    out.replaced += 1
    out.phonemes.append(entry.phoneme)
    return f" lexphoneme{len(out.phonemes) - 1}x "


def restore(text: str, phonemes: list[str]) -> str:
    """A chunk with its phoneme placeholders back as Piper's raw phoneme blocks."""
    if not phonemes:
        return text
    return _PLACEHOLDER.sub(lambda m: f"[[ {phonemes[int(m.group(1))]} ]]", text)


def _pattern_regex(pattern: str) -> str:
    return "".join(r"\w*" if c == "*" else r"\w" if c == "?" else re.escape(c) for c in pattern)
