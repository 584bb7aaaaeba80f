"""One lexicon entry and the limits every entry and lexicon is held to.

An entry maps a written form to what is said: an ``alias`` (other words, every engine) or a
``phoneme`` string (IPA, for an engine that takes phonemes: Piper, through espeak's phoneme input).
It matches a whole word (or words: "New York"), or a ``pattern``: a word with ``*`` (any run of
letters or digits, at most one per pattern) and ``?`` (one letter or digit). Patterns are this
small on purpose: a user's regular expression could match everything or backtrack for minutes;
a pattern here compiles to one that cannot (apply.py).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from pipeline.errors import InputError

MAX_ENTRIES = 50_000  # per lexicon: a version is stored whole, and compiled in a worker
MAX_PATTERNS = 100  # pattern entries per lexicon: each is tried over the text
MAX_WRITTEN_CHARS = 200  # a written form or a pattern
MAX_SAYS_CHARS = 500  # an alias or a phoneme string
MIN_PATTERN_LITERALS = 2  # letters a pattern names outright, so it cannot match every word
_PATTERN_CHARS = re.compile(r"[\w*?'.-]+")
_WORD = re.compile(r"\w")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Entry:
    written: str  # the word(s) as written, or the pattern
    alias: str | None = None  # said instead; or
    phoneme: str | None = None  # IPA said instead (engines that take phonemes)
    case_sensitive: bool = False
    pattern: bool = False  # ``written`` is a pattern, not a literal word

    @property
    def says(self) -> str:
        return self.alias if self.alias is not None else f"/{self.phoneme}/"

    @property
    def key(self) -> tuple[str, bool, bool]:
        """Two entries with one key are one entry: the later replaces the earlier."""
        return (self.written if self.case_sensitive else self.written.lower(), self.case_sensitive, self.pattern)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict) -> Entry:
        return cls(
            d["written"], d.get("alias"), d.get("phoneme"), bool(d.get("case_sensitive")), bool(d.get("pattern"))
        )


def check_entry(entry: Entry, phonemes: frozenset[str] | None, engine: str) -> Entry:
    """The entry, trimmed, or InputError saying what is wrong with it. ``phonemes``: the symbols
    the engine's voices say (None: the engine takes no phonemes)."""
    written = entry.written.strip() if isinstance(entry.written, str) else ""
    what = f"entry {written[:40]!r}"
    if not written:
        raise InputError("an entry's written form is empty")
    if _CONTROL.search(written):
        # a line break or NUL: no text is matched across one, and the text form (one entry a
        # line) could not export it
        raise InputError(f"{what}: the written form contains a control character (a line break, tab or NUL)")
    if len(written) > MAX_WRITTEN_CHARS:
        raise InputError(
            f"{what}...: the written form has {len(written):,} characters; the limit is {MAX_WRITTEN_CHARS}"
        )
    if (entry.alias is None) == (entry.phoneme is None):
        raise InputError(f"{what}: give either an alias or a phoneme string")
    says = (entry.alias if entry.alias is not None else entry.phoneme or "").strip()
    if not says:
        raise InputError(f"{what}: what it says is empty")
    if len(says) > MAX_SAYS_CHARS:
        raise InputError(f"{what}: what it says has {len(says):,} characters; the limit is {MAX_SAYS_CHARS}")
    if any(c in says for c in "[]") or _CONTROL.search(says):
        raise InputError(f"{what}: what it says may not contain [, ] or a control character (a line break, tab or NUL)")
    if entry.pattern:
        check_pattern(written)
    elif not _WORD.search(written):
        raise InputError(f"{what}: a written form needs a letter or digit")
    elif "*" in written or "?" in written:
        # the text form reads * and ? as a pattern: a literal one would export as a pattern, and a
        # user who typed `add Kub* coob` meant one
        raise InputError(f'{what}: * and ? make a pattern; add it as one (--pattern, API "pattern": true)')
    if entry.phoneme is not None:
        _check_phonemes(what, says, phonemes, engine)
        return Entry(written, None, says, entry.case_sensitive, entry.pattern)
    return Entry(written, says, None, entry.case_sensitive, entry.pattern)


def check_pattern(pattern: str) -> None:
    if not _PATTERN_CHARS.fullmatch(pattern):
        raise InputError(f"pattern {pattern!r}: use letters, digits, ' . - and the wildcards * and ?")
    if pattern.count("*") > 1:
        raise InputError(f"pattern {pattern!r}: at most one *")
    literals = sum(1 for c in pattern if c not in "*?")
    if literals < MIN_PATTERN_LITERALS:
        raise InputError(
            f"pattern {pattern!r} would match (nearly) every word: name at least {MIN_PATTERN_LITERALS} of its letters"
        )


def _check_phonemes(what: str, phoneme: str, phonemes: frozenset[str] | None, engine: str) -> None:
    if phonemes is None:
        raise InputError(
            f"{what}: engine {engine!r} takes no phoneme input (it reads only text); give an alias instead"
        )
    unknown = sorted({c for c in phoneme if c != " " and c not in phonemes})
    if unknown:
        raise InputError(f"{what}: the {engine} voice cannot say {''.join(unknown)!r} (not among its IPA phonemes)")


def check_lexicon(entries: list[Entry]) -> None:
    if len(entries) > MAX_ENTRIES:
        raise InputError(f"{len(entries):,} entries; the limit per lexicon is {MAX_ENTRIES:,}")
    patterns = sum(1 for e in entries if e.pattern)
    if patterns > MAX_PATTERNS:
        raise InputError(f"{patterns} pattern entries; the limit per lexicon is {MAX_PATTERNS}")


def merge(entries: list[Entry], added: list[Entry], removed: list[str]) -> list[Entry]:
    """The entries with ``added`` put in (replacing entries of the same key) and the written forms
    in ``removed`` taken out (every entry with that form, in any case)."""
    gone = {w.strip().lower() for w in removed}
    out = {e.key: e for e in entries if e.written.lower() not in gone}
    for e in added:
        out.pop(e.key, None)
        out[e.key] = e
    return list(out.values())
