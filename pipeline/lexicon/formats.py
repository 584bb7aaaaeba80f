"""Lexicon files in and out: W3C PLS (Pronunciation Lexicon Specification 1.0) and a plain text
form, one entry a line:

    SQL = sequel            # an alias, matched in any case
    GIF == jif              # ==: matched only as written (case-sensitive)
    Nguyen = /ŋwɪn/         # /.../: IPA phonemes
    Kub* = coob             # * or ? in the written form: a pattern (entries.py)

PLS files are read with the standard library's XML parser (expat). A document that declares a
DOCTYPE or entities is refused before it is parsed, so no entity expansion ("billion laughs") and
no external entity is ever read.
"""

from __future__ import annotations

import codecs
import re
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape, quoteattr

from pipeline.errors import InputError
from pipeline.lexicon.entries import Entry

PLS_NS = "http://www.w3.org/2005/01/pronunciation-lexicon"
SYNTH_NS = "urn:synth:lexicon"  # case-sensitive and pattern entries, which PLS cannot say
MAX_FILE_BYTES = 20 * 1024 * 1024
_DECLARATIONS = re.compile(rb"<!(DOCTYPE|ENTITY)", re.IGNORECASE)
_LINE = re.compile(r"^(.*?\S)\s*(==?)\s*(\S.*)$")


def parse(data: bytes) -> list[Entry]:
    """Entries from a PLS document or the text form, told apart by the first character that is
    not a space: ``<`` is XML."""
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"a lexicon file of {len(data):,} bytes; the limit is {MAX_FILE_BYTES:,}")
    if not data.removeprefix(codecs.BOM_UTF8).strip():
        # an empty body is a file that did not arrive (curl --data-binary @missing): with
        # --replace it would empty the lexicon
        raise InputError("the lexicon file is empty")
    if data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        raise InputError("a lexicon file must be UTF-8; this one is UTF-16: save it as UTF-8")
    # a byte order mark (Windows editors write one) comes before the "<" of a PLS document
    if data.removeprefix(codecs.BOM_UTF8).lstrip().startswith(b"<"):
        return parse_pls(data)
    try:
        return parse_text(data.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise InputError(f"a lexicon file must be UTF-8 text or a PLS document: byte {e.start} is not UTF-8") from e


def parse_pls(data: bytes) -> list[Entry]:
    if _DECLARATIONS.search(data):
        raise InputError("a PLS file may not declare a DOCTYPE or entities")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        line, column = e.position
        raise InputError(f"not a PLS file: not well-formed XML at line {line}, column {column}") from e
    except (LookupError, ValueError) as e:  # an encoding declaration Python does not know
        raise InputError(f"not a PLS file: {e}") from e
    if root.tag != f"{{{PLS_NS}}}lexicon":
        raise InputError(
            f'not a PLS file: the root element is <{root.tag.rsplit("}", 1)[-1]}>, expected <lexicon xmlns="{PLS_NS}">'
        )
    alphabet = root.get("alphabet", "ipa")
    entries = []
    for n, lexeme in enumerate(root.iter(f"{{{PLS_NS}}}lexeme"), 1):
        entries.extend(_lexeme(lexeme, n, alphabet))
    return entries


def _lexeme(lexeme: ET.Element, n: int, alphabet: str) -> list[Entry]:
    graphemes = [(g.text or "").strip() for g in lexeme.findall(f"{{{PLS_NS}}}grapheme")]
    alias = lexeme.find(f"{{{PLS_NS}}}alias")
    phoneme = lexeme.find(f"{{{PLS_NS}}}phoneme")
    if not graphemes:
        raise InputError(f"PLS lexeme {n}: no <grapheme>")
    case_sensitive = lexeme.get(f"{{{SYNTH_NS}}}case-sensitive") == "true"
    pattern = lexeme.get(f"{{{SYNTH_NS}}}pattern") == "true"
    if alias is not None:
        return [Entry(g, alias=alias.text or "", case_sensitive=case_sensitive, pattern=pattern) for g in graphemes]
    if phoneme is None:
        raise InputError(f"PLS lexeme {n} ({graphemes[0][:40]!r}): neither <alias> nor <phoneme>")
    own = phoneme.get("alphabet", alphabet)
    if own != "ipa":
        raise InputError(
            f'PLS lexeme {n} ({graphemes[0][:40]!r}): alphabet {own!r}; synth takes IPA phonemes (alphabet="ipa")'
        )
    return [Entry(g, phoneme=phoneme.text or "", case_sensitive=case_sensitive, pattern=pattern) for g in graphemes]


def parse_text(text: str) -> list[Entry]:
    entries = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        m = _LINE.match(line)
        if m is None:
            raise InputError(f"line {n}: expected `word = says` (or `word = /ipa/`), got {line[:60]!r}")
        written, sign, says = m.groups()
        case_sensitive, pattern = sign == "==", any(c in written for c in "*?")
        if len(says) > 2 and says.startswith("/") and says.endswith("/"):
            entries.append(Entry(written, phoneme=says[1:-1], case_sensitive=case_sensitive, pattern=pattern))
        else:
            entries.append(Entry(written, alias=says, case_sensitive=case_sensitive, pattern=pattern))
    return entries


def to_pls(entries: list[Entry], lang: str = "en-US") -> str:
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<lexicon version="1.0" xmlns="{PLS_NS}" xmlns:synth="{SYNTH_NS}" alphabet="ipa" xml:lang={quoteattr(lang)}>',
    ]
    for e in entries:
        flags = (' synth:case-sensitive="true"' if e.case_sensitive else "") + (
            ' synth:pattern="true"' if e.pattern else ""
        )
        says = (
            f"<alias>{escape(e.alias)}</alias>"
            if e.alias is not None
            else f"<phoneme>{escape(e.phoneme or '')}</phoneme>"
        )
        lines.append(f"  <lexeme{flags}><grapheme>{escape(e.written)}</grapheme>{says}</lexeme>")
    lines.append("</lexicon>")
    return "\n".join(lines) + "\n"


def to_text(entries: list[Entry]) -> str:
    return "".join(f"{e.written} {'==' if e.case_sensitive else '='} {e.says}\n" for e in entries)
