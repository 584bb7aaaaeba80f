"""The text front end: what a job's text means, before it is split into engine-sized chunks.

One pass, shared by every engine (pipeline/render.py calls ``prepare``):

1. Markup. A ``<speak>`` document is parsed as SSML (ssml.py). Other text keeps ``<`` and ``>``,
   but HTML-like tags (``<b>``, ``<br/>``, ``<!-- -->``) are removed, never read aloud, and HTML
   entities are decoded. The engine's own inline tags (Orpheus: ``<laugh>`` ...) are kept for it;
   any other engine loses them with the rest of the markup.
2. The lexicon. The job's pronunciation lexicon (pipeline/lexicon) says its words as their
   aliases or phonemes, before any other rule reads them; the markup is parsed first, so an
   entry never rewrites a tag.
3. Readings. Money, web addresses and e-mail addresses become words (readings.py).
4. Characters. Emoji are silent unless the settings say to read them, and characters of scripts
   the voice's languages do not use are dropped (scripts.py): a voice that spells out foreign
   letters by name is worse than silence.
5. What happened is counted (``Prepared.notes``), recorded with the job and shown by
   ``synth status`` and the API.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from pipeline import text as plain
from pipeline.constants import CHARS_PER_SECOND
from pipeline.lexicon.apply import Compiled, restore
from pipeline.plural import counted
from pipeline.textfront import readings, scripts, ssml
from pipeline.textfront.ssml import Pause, Speech

# Seconds of audio an engine's inline tag (a laugh, a sigh) is allowed in a token budget: it is
# not speech, so its characters are not counted as if they were.
INLINE_TAG_SECONDS = 1.0
_TAG = re.compile(r"<!--.*?-->|</?([A-Za-z][\w:.-]*)(?:\s[^<>]*)?/?>", re.DOTALL)
_INLINE = re.compile(r"<([a-z]+)>")
# Tags inside a word: removed without a space (wo<b>r</b>d); the others separate words.
_INLINE_HTML = frozenset(
    "a abbr b bdi bdo cite code data del dfn em font i ins kbd mark q s samp "
    "small span strong sub sup time u var wbr".split()
)


@dataclass(frozen=True)
class VoiceProfile:
    """What an engine's voice can say (engines/base.py EngineInfo.profile)."""

    name: str
    languages: tuple[str, ...] = ()  # e.g. ("en_US",); empty: not declared
    inline_tags: frozenset[str] = frozenset()  # tags the engine performs (Orpheus: laugh ...)
    rate_control: bool = False  # SynthesisRequest.rate is honoured
    phonemes: bool = False  # takes IPA in Piper's [[ ... ]] blocks


@dataclass
class Prepared:
    parts: list[Speech | Pause]
    notes: dict = field(default_factory=dict)  # what was normalized or dropped; empty: nothing
    phonemes: list[str] = field(default_factory=list)  # lexicon IPA, by placeholder (lexicon/apply.py)

    def pieces(self, max_chars: int) -> tuple[list[Speech], list[float]]:
        """Chunks of at most ``max_chars`` with their rate, and the seconds of silence around
        them: ``pauses[i]`` before chunk ``i``, ``pauses[-1]`` after the last one."""
        chunks: list[Speech] = []
        pauses = [0.0]
        between = 0.0  # paragraph pauses: kept only where speech follows
        for part in self.parts:
            if isinstance(part, Pause):
                if part.soft:
                    between += part.seconds if chunks else 0.0
                else:
                    pauses[-1] += part.seconds
                continue
            for chunk in plain.split_chunks(part.text, max_chars):
                if plain.has_speakable_content(chunk):
                    pauses[-1] += between
                    between = 0.0
                    chunks.append(Speech(restore(chunk, self.phonemes), part.rate))
                    pauses.append(0.0)
        return chunks, pauses


def prepare(text: str, voice: VoiceProfile, read_emoji: bool = False, lexicon: Compiled | None = None) -> Prepared:
    """Raises MarkupError for a ``<speak>`` document that is not well-formed. ``lexicon``: the
    job's lexicon version, compiled (pipeline/lexicon/store.py Versions)."""
    counts: dict[str, int] = {}
    if ssml.is_ssml(text):
        found = ssml.Notes()
        parts = ssml.parse(text, voice.inline_tags, voice.rate_control, found)
        _count(counts, "ssml_breaks", found.breaks)
        _count(counts, "ssml_say_as", found.say_as)
        _count(counts, "rate_ignored", found.rate_ignored)
        _count(counts, "tags_removed", found.dropped_tags)
    else:
        parts = [Speech(_strip_tags(text, voice.inline_tags, counts))]
    allowed = scripts.scripts_for(voice.languages)
    dropped = scripts.Dropped()
    phonemes: list[str] = []
    for part in parts:
        if isinstance(part, Speech):
            if lexicon is not None:
                said = lexicon.apply(part.text, voice.phonemes, phonemes)
                _count(counts, "lexicon_entries", said.replaced)
                _count(counts, "lexicon_phonemes_skipped", said.skipped_phonemes)
                part.text = said.text
            expanded, n = readings.expand(plain.normalize(part.text))
            _count(counts, "readings_expanded", n)
            part.text = plain.normalize(scripts.keep_speakable(expanded, allowed, read_emoji, dropped))
    _count(counts, "foreign_chars_dropped", dropped.foreign)
    _count(counts, "emoji_dropped", dropped.emoji)
    return Prepared(parts, counts, phonemes)


def unspeakable_reason(text: str, voice: VoiceProfile, notes: dict) -> str:
    """Why a job's text left nothing to say, for its error."""
    why = f"nothing speakable in line: {text[:60]!r}"
    if notes.get("foreign_chars_dropped"):
        langs = ", ".join(voice.languages)
        dropped = counted(
            notes["foreign_chars_dropped"],
            "character of other scripts was dropped",
            "characters of other scripts were dropped",
        )
        why += f"; voice {voice.name!r} speaks {langs}, and {dropped}"
    if notes.get("emoji_dropped"):
        silent = counted(notes["emoji_dropped"], "emoji is silent", "emoji are silent")
        why += f"; {silent} (SYNTH_READ_EMOJI=true reads them)"
    return why


def speech_seconds(text: str) -> float:
    """Expected seconds of audio for a chunk: its words at CHARS_PER_SECOND, and each inline
    tag (``<laugh>``) at INLINE_TAG_SECONDS rather than as the characters of its name."""
    tags = len(_INLINE.findall(text))
    return len(_INLINE.sub("", text)) / CHARS_PER_SECOND + tags * INLINE_TAG_SECONDS


def _strip_tags(text: str, inline_tags: frozenset[str], counts: dict) -> str:
    def replace(m: re.Match) -> str:
        name = (m.group(1) or "").lower()
        if name in inline_tags and not m.group(0).startswith("</"):
            return f" <{name}> "
        counts["tags_removed"] = counts.get("tags_removed", 0) + 1
        return "" if name in _INLINE_HTML else " "

    stripped = _TAG.sub(replace, text)
    return html.unescape(stripped) if "&" in stripped else stripped


def _count(counts: dict, key: str, n: int) -> None:
    if n:
        counts[key] = counts.get(key, 0) + n
