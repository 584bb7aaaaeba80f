"""``<speak>`` documents: the SSML subset synth honours, parsed with the standard library's XML parser.

The subset:

- ``<break time="500ms"/>`` or ``strength="none|x-weak|weak|medium|strong|x-strong"`` (no
  attribute: medium): silence of that length in the audio, on every engine (at most 10 s);
- ``<p>`` and ``<s>``: a paragraph or sentence ends there (a paragraph with a strong pause);
- ``<sub alias="...">``: the alias is said instead of the text;
- ``<say-as interpret-as="characters|spell-out|cardinal|ordinal|date|telephone">`` (date takes
  ``format="mdy|dmy|ymd|..."``): the text as those words;
- ``<prosody rate="x-slow|slow|medium|fast|x-fast|N%">``: where the engine can change its
  speaking rate (Piper), ignored and noted elsewhere;
- the engine's own inline tags (Orpheus: ``<laugh/>`` ...), passed through as ``<laugh>``.

Any other element is dropped and its text kept. A document that is not well-formed XML fails its
job with the parser's line and column and what it expected there.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.errors import MarkupError
from pipeline.textfront import numbers

BREAK_STRENGTHS = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.5, "strong": 0.75, "x-strong": 1.25}
MAX_BREAK_SECONDS = 10.0
RATES = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.5}
RATE_RANGE = (0.5, 2.0)
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*$")
_SENTENCE_END = ".!?…:;"
_SPEAK_START = re.compile(r"\s*(?:<\?xml[^>]*\?>\s*)?<speak[\s/>]")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])")


@dataclass
class Speech:
    text: str
    rate: float = 1.0


@dataclass
class Pause:
    seconds: float
    soft: bool = False  # a paragraph's pause: not kept at the very start or end


@dataclass
class Notes:
    dropped_tags: int = 0
    breaks: int = 0
    rate_ignored: int = 0
    say_as: int = 0


def is_ssml(text: str) -> bool:
    """A document whose first element is ``<speak>`` (after an XML declaration, if any)."""
    return _SPEAK_START.match(text) is not None


def parse(text: str, emotive_tags: frozenset[str], rate_control: bool, notes: Notes) -> list[Speech | Pause]:
    """A ``<speak>`` document -> speech and pauses, in order."""
    if re.search(r"<!(DOCTYPE|ENTITY)", text, re.IGNORECASE):
        raise MarkupError("SSML may not declare a DOCTYPE or entities")
    root = _parse_xml(text.strip())
    if _local(root.tag) != "speak":
        raise MarkupError(f"an SSML document's root element must be <speak>, not <{_local(root.tag)}>")
    out = _Builder()
    _walk_children(root, out, emotive_tags, rate_control, notes)
    return out.close()


def _parse_xml(text: str) -> ET.Element:
    """The document's root, or MarkupError naming the parser's line and column (expat's: the line
    from 1, the column from 0) and what was expected, from the elements open where it stopped."""
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
    stack: list[str] = []
    roots: list[ET.Element] = []
    try:
        parser.feed(text)
        _read(parser, stack, roots)  # raises a syntax error where the parser found it
        parser.close()  # raises for a document that ends too early
        _read(parser, stack, roots)
    except ET.ParseError as e:
        line, column = e.position
        reason = str(e).split(":")[0]
        raise MarkupError(
            f"malformed SSML at line {line}, column {column}: {reason}; {_expected(reason, stack)}"
        ) from e
    return roots[0]


def _read(parser: ET.XMLPullParser[ET.Element], stack: list[str], roots: list[ET.Element]) -> None:
    """Keep the stack of open elements up to date, so an error can say which one to close."""
    # typeshed allows a 1-tuple among the events; ElementTree yields (event, element) pairs only
    for event, element in parser.read_events():  # type: ignore[misc]
        assert isinstance(element, ET.Element)  # the parser was asked for start and end events only
        if event == "end":
            stack.pop()
        else:
            stack.append(_local(element.tag))
            roots.append(element) if not roots else None


def _expected(reason: str, stack: list[str]) -> str:
    if "mismatched tag" in reason or "no element found" in reason or "unclosed token" in reason:
        return f"expected </{stack[-1]}>" if stack else "expected a <speak> element"
    if "junk after document element" in reason:
        return "expected nothing after </speak>"
    return "expected text or a tag (write & as &amp; and < as &lt; inside <speak>)"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


class _Builder:
    """Collects text at the current rate; a pause or a change of rate closes the text so far."""

    def __init__(self) -> None:
        self.parts: list[Speech | Pause] = []
        self.buf: list[str] = []
        self.rate = 1.0

    def text(self, s: str | None) -> None:
        if s:
            self.buf.append(s)

    def flush(self) -> None:
        text = _SPACE_BEFORE_PUNCT.sub(r"\1", " ".join("".join(self.buf).split()))
        if text:
            self.parts.append(Speech(text, self.rate))
        self.buf = []

    def pause(self, seconds: float, soft: bool = False) -> None:
        self.flush()
        self.parts.append(Pause(seconds, soft))

    def end_sentence(self) -> None:
        text = "".join(self.buf).rstrip()
        if text and text[-1] not in _SENTENCE_END:
            self.buf = [text, ". "]

    def close(self) -> list[Speech | Pause]:
        self.flush()
        return self.parts


def _walk_children(element, out: _Builder, emotive, rate_control: bool, notes: Notes) -> None:
    out.text(element.text)
    for child in element:
        _element(child, out, emotive, rate_control, notes)
        out.text(child.tail)


def _element(el, out: _Builder, emotive, rate_control: bool, notes: Notes) -> None:
    tag = _local(el.tag)
    if tag == "break":
        notes.breaks += 1
        out.pause(_break_seconds(el))
    elif tag == "sub":
        out.text(el.get("alias") if el.get("alias") is not None else "".join(el.itertext()))
    elif tag == "say-as":
        notes.say_as += 1
        out.text(say_as("".join(el.itertext()), el.get("interpret-as", ""), el.get("format")))
    elif tag in ("p", "s"):
        _walk_children(el, out, emotive, rate_control, notes)
        out.end_sentence()
        if tag == "p":
            out.pause(BREAK_STRENGTHS["strong"], soft=True)
    elif tag == "prosody" and el.get("rate") is not None:
        outer = out.rate
        rate = _rate(el.get("rate"))
        if not rate_control and rate != 1.0:
            notes.rate_ignored += 1
        elif rate != 1.0:
            out.flush()
            out.rate = min(max(outer * rate, RATE_RANGE[0]), RATE_RANGE[1])
        _walk_children(el, out, emotive, rate_control, notes)
        if out.rate != outer:
            out.flush()
            out.rate = outer
    elif tag in emotive:
        out.text(f" <{tag}> ")
    else:
        if tag != "speak":
            notes.dropped_tags += 1
        _walk_children(el, out, emotive, rate_control, notes)


def _break_seconds(el) -> float:
    time = el.get("time")
    if time is not None:
        m = _TIME.match(time)
        if not m:
            raise MarkupError(f"SSML <break time={time!r}>: expected a duration like 500ms or 2s")
        seconds = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
        return min(seconds, MAX_BREAK_SECONDS)
    strength = el.get("strength", "medium")
    if strength not in BREAK_STRENGTHS:
        raise MarkupError(f"SSML <break strength={strength!r}>: expected one of {', '.join(BREAK_STRENGTHS)}")
    return BREAK_STRENGTHS[strength]


def _rate(value: str) -> float:
    value = value.strip()
    if value in RATES:
        return RATES[value]
    m = re.match(r"^([+-]?)(\d+(?:\.\d+)?)%$", value)
    if not m:
        raise MarkupError(
            f"SSML <prosody rate={value!r}>: expected x-slow, slow, medium, fast, x-fast or a percentage like 80%"
        )
    sign, pct = m.group(1), float(m.group(2)) / 100
    return 1.0 + pct if sign == "+" else 1.0 - pct if sign == "-" else pct


def say_as(text: str, interpret_as: str, fmt: str | None) -> str:
    """The words for ``text`` read as ``interpret_as``; the text itself when it does not parse as
    one (a date that is not a date) or the kind is not in the subset."""
    speak: Callable[[str], str | None] | None = {
        "cardinal": numbers.cardinal_text,
        "number": numbers.cardinal_text,
        "ordinal": numbers.ordinal_text,
        "telephone": numbers.telephone_text,
        "characters": spell_out,
        "spell-out": spell_out,
        "date": lambda t: numbers.date_text(t, fmt),
    }.get(interpret_as)
    words = speak(text) if speak else None
    return f" {words} " if words else text


def spell_out(text: str) -> str:
    """One character at a time: letters as capitals (engines say a lone capital by its name),
    digits as words."""
    return " ".join(numbers.cardinal(int(c)) if c.isdigit() else c.upper() for c in text if c.isalnum())
