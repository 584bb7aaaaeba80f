"""Word timings as files a user ships: ``words.json``, SubRip (``.srt``) and WebVTT (``.vtt``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from pipeline.verify.recognizer import Word

CUE_WORDS = 7  # a caption line a reader takes in at a glance
CUE_SECONDS = 3.5
FORMATS = ("json", "srt", "vtt")


def cues(words: Sequence[Word]) -> list[tuple[float, float, str]]:
    """Words grouped into captions of at most CUE_WORDS words and CUE_SECONDS seconds."""
    out: list[tuple[float, float, str]] = []
    group: list[Word] = []
    for word in words:
        if group and (len(group) == CUE_WORDS or word.end - group[0].start > CUE_SECONDS):
            out.append((group[0].start, group[-1].end, " ".join(w.word for w in group)))
            group = []
        group.append(word)
    if group:
        out.append((group[0].start, group[-1].end, " ".join(w.word for w in group)))
    return out


def render(words: Sequence[Word], fmt: str, *, approximate: bool = False) -> str:
    if fmt == "json":
        # A word a line, each through json's C encoder: with ``indent`` json takes its pure-Python
        # encoder, 2.7 s for a book's 100,000 words.
        entries = ",\n".join(json.dumps(_entry(w), ensure_ascii=False) for w in words)
        return f'{{"approximate": {json.dumps(approximate)}, "words": [\n{entries}\n]}}\n'

    if fmt == "srt":
        return "".join(
            f"{i}\n{_stamp(a, ',')} --> {_stamp(b, ',')}\n{text}\n\n" for i, (a, b, text) in enumerate(cues(words), 1)
        )
    if fmt == "vtt":
        return "WEBVTT\n\n" + "".join(
            f"{_stamp(a, '.')} --> {_stamp(b, '.')}\n{text}\n\n" for a, b, text in cues(words)
        )
    raise ValueError(f"unknown caption format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _entry(w: Word) -> dict:
    """A word of words.json; ``spoken`` where the text front end read the written word as others."""
    entry = {
        "word": w.word,
        "start": round(w.start, 3),
        "end": round(w.end, 3),
        "confidence": None if w.confidence is None else round(w.confidence, 3),
    }
    return {**entry, "spoken": w.spoken} if w.spoken else entry


def _stamp(seconds: float, mark: str) -> str:
    ms = max(0, round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{mark}{ms:03d}"
