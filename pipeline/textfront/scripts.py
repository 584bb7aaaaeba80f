"""Characters a voice can say: its languages' scripts, and emoji.

Unicode's script property is not in the standard library; a character's name starts with its
script for every script that matters here ("ARABIC LETTER MEEM", "CJK UNIFIED IDEOGRAPH-65E5",
"HIRAGANA LETTER NO", "IDEOGRAPHIC FULL STOP"), which is enough to tell a voice's own letters from
the letters of scripts it would only spell out by name ("arabic letter ...").
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

# First words of character names that name a script.
KNOWN_SCRIPTS = frozenset(
    "LATIN GREEK COPTIC CYRILLIC ARMENIAN HEBREW ARABIC SYRIAC THAANA NKO SAMARITAN DEVANAGARI "
    "BENGALI GURMUKHI GUJARATI ORIYA TAMIL TELUGU KANNADA MALAYALAM SINHALA THAI LAO TIBETAN "
    "MYANMAR GEORGIAN HANGUL ETHIOPIC CHEROKEE CANADIAN OGHAM RUNIC TAGALOG KHMER MONGOLIAN "
    "LIMBU BUGINESE BALINESE SUNDANESE JAVANESE HIRAGANA KATAKANA BOPOMOFO CJK IDEOGRAPHIC KANGXI "
    "YI VAI BAMUM TIFINAGH".split()
)
_LATIN = frozenset({"LATIN"})
# Language (ISO 639-1, the part before "_" in en_US) -> the scripts its voices read.
LANGUAGE_SCRIPTS = {
    **{
        lang: _LATIN
        for lang in (
            "en af ca cs cy da de es et eu fi fr ga gl hr hu id is it lb lt lv ms mt nl no nb nn pl "
            "pt ro sk sl sq sv sw tr vi"
        ).split()
    },
    **{lang: frozenset({"CYRILLIC"}) for lang in ("ru", "uk", "bg", "sr", "mk", "be", "kk")},
    "el": frozenset({"GREEK"}),
    **{lang: frozenset({"ARABIC"}) for lang in ("ar", "fa", "ur")},
    "he": frozenset({"HEBREW"}),
    **{lang: frozenset({"DEVANAGARI"}) for lang in ("hi", "mr", "ne")},
    "ja": frozenset({"CJK", "IDEOGRAPHIC", "HIRAGANA", "KATAKANA"}),
    "zh": frozenset({"CJK", "IDEOGRAPHIC", "BOPOMOFO"}),
    "ko": frozenset({"HANGUL", "CJK", "IDEOGRAPHIC"}),
    "th": frozenset({"THAI"}),
    "ka": frozenset({"GEORGIAN"}),
    "hy": frozenset({"ARMENIAN"}),
}
# Pictographs, and the joiners and modifiers that build emoji sequences out of them.
_EMOJI_RANGES = ((0x1F000, 0x1FAFF), (0x2600, 0x27BF), (0x2B00, 0x2BFF), (0x2300, 0x23FF), (0xE0020, 0xE007F))
_EMOJI_GLUE = frozenset({0x200D, 0x20E3, 0xFE0E, 0xFE0F}) | frozenset(range(0x1F3FB, 0x1F400))


def scripts_for(languages: tuple[str, ...]) -> frozenset[str] | None:
    """The scripts a voice of these languages reads; None (every script) for a language this table
    does not know, so an unknown voice loses nothing."""
    out: set[str] = set()
    for lang in languages:
        scripts = LANGUAGE_SCRIPTS.get(lang.replace("-", "_").split("_")[0].lower())
        if scripts is None:
            return None
        out |= scripts
    return frozenset(out) if out else None


def is_emoji(c: str) -> bool:
    o = ord(c)
    return o in _EMOJI_GLUE or any(lo <= o <= hi for lo, hi in _EMOJI_RANGES)


def script_of(c: str) -> str | None:
    """The script a character's name starts with; None for ASCII and for characters every script
    shares (digits, punctuation, currency signs)."""
    if c.isascii():
        return None
    first = unicodedata.name(c, "").split(" ")[0].split("-")[0]
    return first if first in KNOWN_SCRIPTS else None


@dataclass
class Dropped:
    foreign: int = 0  # letters and digits of scripts the voice cannot read
    emoji: int = 0  # pictographs (not the joiners and modifiers between them)


def keep_speakable(text: str, scripts: frozenset[str] | None, read_emoji: bool, dropped: Dropped) -> str:
    """``text`` without emoji (unless ``read_emoji``) and without characters of other scripts;
    a combining mark goes with the character it sits on."""
    out = []
    kept_last = True
    for c in text:
        cat = unicodedata.category(c)
        if is_emoji(c):
            keep = read_emoji
            if not keep and ord(c) not in _EMOJI_GLUE:
                dropped.emoji += 1
        elif cat[0] == "M" and script_of(c) is None:
            keep = kept_last  # a combining mark follows its base
        else:
            script = script_of(c)
            keep = scripts is None or script is None or script in scripts
            if not keep and cat[0] in "LN":
                dropped.foreign += 1
        if keep:
            out.append(c)
        elif out and out[-1] != " " and cat[0] in "LNS":
            out.append(" ")  # a dropped word leaves a word boundary
        kept_last = keep
    return "".join(out)
