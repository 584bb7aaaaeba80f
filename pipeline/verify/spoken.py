"""What a text should sound like when an engine reads it: the words it says (after the text front
end and the job's lexicon), which of them a recognizer cannot be held to, and how long the reading
should take.

A word is *unsure* where a recognizer of the voice's language cannot be expected to hear it as
written, however well it is said: a word written with letters outside ASCII (café, Zürich,
Kraków: a foreign word, said the foreign way, that the recognizer knows only by an English
reading), a letter of an acronym read out letter by letter ("SSML": "s s m l", letters that a
recognizer's language model turns into words), and a word the recognizer's dictionary lacks (a
name, a coinage: it can only ever hear something else). Unsure words are not compared: what the
recognizer heard in their place costs nothing, up to a bound (``pipeline/verify/verdict.py``).

The length is counted in syllables, the unit speaking rates are measured in, with a pause at each
sentence end and each comma or colon inside the text, and the SSML breaks it asks for. The rates
are Piper's (en_US lessac, medium) measured on the normalization corpus and the first 160 lines of
the benchmark corpus: the speech's length over this expectation has a mean of 1.0 and a spread of
about 0.07 there (0.8x to 1.25x on every line), and the verdict's bounds (0.45x to 2.5x) leave
room for slower and faster voices.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, replace

from pipeline import textfront
from pipeline.lexicon.apply import Compiled
from pipeline.textfront import VoiceProfile
from pipeline.textfront.numbers import cardinal, ordinal
from pipeline.textfront.ssml import Pause, Speech

SYLLABLE_S = 0.175  # Piper's lessac voice: about 5.7 syllables a second of speech
SENTENCE_PAUSE_S = 0.42  # between sentences
CLAUSE_PAUSE_S = 0.33  # at a comma, semicolon or colon
ONSET_S = 0.3  # a reading's first and last sounds, longer than its syllables' share
SHORTEST_S = 0.5

_FOREIGN, _SPELLED = "\x01", "\x02"  # marks carried through the rewrites below, one per word
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+(?=\S)")
_CLAUSE = re.compile(r"[,;:]\s+(?=\S)")


@dataclass(frozen=True)
class Said:
    """The words the engine is given for a text, lower case, digits as words, with what a
    recognizer cannot be held to and how long they should take."""

    words: list[str]
    unsure: frozenset[int]  # indices of words spelled foreign or letter by letter
    breaks: tuple[float, ...]  # the SSML breaks' seconds
    sentences: int = 0  # sentence ends inside the text (each a pause)
    clauses: int = 0  # commas, semicolons and colons inside a sentence

    @property
    def longest_break(self) -> float:
        return max(self.breaks, default=0.0)

    def expected_s(self) -> float:
        """Seconds from the first to the last sound of a reading at Piper's pace."""
        speech = (
            ONSET_S
            + SYLLABLE_S * sum(syllables(w) for w in self.words)
            + SENTENCE_PAUSE_S * self.sentences
            + CLAUSE_PAUSE_S * self.clauses
        )
        return max(SHORTEST_S, speech + sum(self.breaks))


def said_for(text: str, voice: VoiceProfile, lexicon: Compiled | None = None) -> Said:
    """What the engine says for ``text`` in ``voice``, read with the job's ``lexicon``. A phoneme
    entry keeps its written word: how a recognizer spells IPA is unknown."""
    prepared = textfront.prepare(text, replace(voice, phonemes=False), lexicon=lexicon)
    speech = [p.text for p in prepared.parts if isinstance(p, Speech)]
    marked = [w for part in speech for w in _marked_words(part)]
    return Said(
        words=[w.lstrip(_FOREIGN + _SPELLED) for w in marked],
        unsure=frozenset(i for i, w in enumerate(marked) if w[0] in (_FOREIGN, _SPELLED)),
        breaks=tuple(p.seconds for p in prepared.parts if isinstance(p, Pause)),
        sentences=sum(len(_SENTENCE_END.findall(p.strip())) for p in speech),
        clauses=sum(len(_CLAUSE.findall(p.strip())) for p in speech),
    )


def spoken_words(text: str, voice: VoiceProfile, lexicon: Compiled | None = None) -> tuple[list[str], float]:
    """The words the engine is given for ``text``, and the longest pause the text asks for (SSML
    breaks), in seconds."""
    said = said_for(text, voice, lexicon)
    return said.words, said.longest_break


def words_of(text: str) -> list[str]:
    """A text's words as a recognizer spells them: lower case ASCII, numbers as words."""
    return [w.lstrip(_FOREIGN + _SPELLED) for w in _marked_words(text)]


def _marked_words(text: str) -> list[str]:
    # A word written with letters outside ASCII is marked before it is spelled in ASCII below.
    text = re.sub(r"\w*[^\x00-\x7f]\w*", lambda m: _FOREIGN + m.group() if m.group().isalpha() else m.group(), text)
    # Recognizers spell in ASCII: café is heard as cafe.
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = text.replace("&", " and ")  # as the engines read an ampersand
    # An acronym in capitals is read letter by letter (SSML: "s s m l"), as the engines say it.
    text = re.sub(r"\b[A-Z]{2,5}\b", lambda m: " ".join(_SPELLED + c for c in m.group()), text)
    # Numbers as the engines read them: "1,250" is one thousand two hundred fifty, not "one" and
    # "two hundred fifty"; "3.14" is three point one four; "3rd" third; "10%" ten percent.
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)
    text = re.sub(r"\b(\d{1,12})(?:st|nd|rd|th)\b", lambda m: f" {ordinal(int(m.group(1)))} ", text, flags=re.I)
    text = re.sub(r"(?<=\d)\s?%", " percent", text)
    text = re.sub(r"(?<=\d)\.(\d+)", lambda m: " point " + " ".join(m.group(1)), text)
    text = re.sub(r"\d+", lambda m: f" {cardinal(int(m.group()))} " if len(m.group()) < 13 else m.group(), text)
    return re.findall(f"[{_FOREIGN}{_SPELLED}]?[a-z0-9']+", text.lower().replace("-", " "))


def syllables(word: str) -> int:
    """Its vowel groups, a silent final e not counted: within one of a dictionary's count for
    most English words, and errors of either sign cancel over a line."""
    groups = len(re.findall(r"[aeiouy]+", word))
    if groups > 1 and word.endswith("e") and not word.endswith(("le", "ee")):
        groups -= 1
    return max(1, groups)
