"""Captions in the words the user wrote: "$1,250.50" shown for as long as the audio says "one
thousand two hundred fifty dollars and fifty cents".

The text front end rewrites amounts, numbers, web and e-mail addresses one written word at a time,
so each written word is read through the same front end on its own, and its spoken words are
taken, in order, from the timed words of the whole text. Where the two do not line up (an SSML
document, whose ``<sub>`` and ``<say-as>`` speak for markup rather than for a written word, or a
rewrite that reaches across words), there is no mapping and captions show the spoken words."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from pipeline.errors import MarkupError
from pipeline.textfront import ssml
from pipeline.verify.recognizer import Word

_TAG = re.compile(r"<[^>]*>")  # HTML-like markup the front end removes: never shown


def written_words(text: str, timed: Sequence[Word], spoken: Callable[[str], list[str]]) -> list[Word] | None:
    """Each written word of ``text`` timed from the first to the last of its spoken words in
    ``timed``, with the spoken words beside it where they differ; ``spoken(word)``: the words the
    front end makes of one written word. A written word with no spoken words (an emoji, another
    script) has no time and is left out. None where the words do not line up."""
    if ssml.is_ssml(text):
        return None
    try:
        groups = [(shown, spoken(token)) for token in text.split() if (shown := _TAG.sub("", token))]
    except MarkupError:  # a written word that reads as an SSML document of its own
        return None
    if [w for _, said in groups for w in said] != [w.word for w in timed]:
        return None
    out, at = [], 0
    for shown, said in groups:
        if not said:
            continue
        span = timed[at : at + len(said)]
        at += len(said)
        confidences = [w.confidence for w in span if w.confidence is not None]
        out.append(
            Word(
                shown,
                span[0].start,
                span[-1].end,
                None if len(confidences) < len(span) else min(confidences),
                spoken=None if said == _plain(shown) else " ".join(said),
            )
        )
    return out


def _plain(shown: str) -> list[str]:
    """A written word's own letters, as a recognizer spells them: spoken words equal to these are
    not a rewrite, and are not shown again."""
    return re.findall(r"[a-z0-9']+", shown.lower().replace("-", " "))
