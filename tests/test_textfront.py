"""The text front end's output text: SSML, markup, emoji, foreign scripts, numbers (no engine)."""

from __future__ import annotations

import pytest

from pipeline.errors import MarkupError
from pipeline.summary import describe_text_notes
from pipeline.textfront import VoiceProfile, prepare, speech_seconds, unspeakable_reason
from pipeline.textfront import numbers
from pipeline.textfront.ssml import Pause, Speech

JOE = VoiceProfile("joe", ("en_US",), rate_control=True)
TARA = VoiceProfile("tara", ("en",), frozenset({"laugh", "sigh"}))


def said(text: str, voice: VoiceProfile = JOE, **kw) -> str:
    """The words the engine gets, pauses left out."""
    return " | ".join(p.text for p in prepare(text, voice, **kw).parts if isinstance(p, Speech))


# Markup ---------------------------------------------------------------------------------------


def test_a_speak_document_becomes_its_words_and_a_break_of_the_asked_length():
    prepared = prepare("<speak>Some <break time='500ms'/> text &amp; more</speak>", JOE)
    assert prepared.parts == [Speech("Some"), Pause(0.5), Speech("text & more")]
    chunks, pauses = prepared.pieces(400)
    assert [c.text for c in chunks] == ["Some", "text & more"] and pauses == [0.0, 0.5, 0.0]
    assert prepared.notes == {"ssml_breaks": 1}


@pytest.mark.parametrize(
    "markup, seconds",
    [
        ('<break time="2s"/>', 2.0),
        ('<break time="1.5 s"/>', 1.5),
        ('<break time="250ms"/>', 0.25),
        ('<break strength="x-strong"/>', 1.25),
        ('<break strength="weak"/>', 0.25),
        ("<break/>", 0.5),
        ('<break time="1h"/>'.replace("1h", "60s"), 10.0),
    ],
)
def test_break_time_and_strength_are_seconds_of_silence(markup, seconds):
    chunks, pauses = prepare(f"<speak>One {markup} two</speak>", JOE).pieces(400)
    assert len(chunks) == 2 and pauses == [0.0, seconds, 0.0]


def test_breaks_at_the_edges_are_kept_but_a_paragraphs_pause_is_only_between_paragraphs():
    _, pauses = prepare('<speak><break time="1s"/>Hi<break time="2s"/></speak>', JOE).pieces(400)
    assert pauses == [1.0, 2.0]
    chunks, pauses = prepare("<speak><p>One</p><p>Two</p></speak>", JOE).pieces(400)
    assert [c.text for c in chunks] == ["One.", "Two."] and pauses == [0.0, 0.75, 0.0]
    _, pauses = prepare('<speak><p>One<break time="1s"/></p></speak>', JOE).pieces(400)
    assert pauses == [0.0, 1.0]  # an asked break at the end stays


def test_sentences_end_sub_says_its_alias_and_unknown_tags_keep_their_text():
    assert (
        said(
            "<speak><s>First</s><s>Second!</s> <sub alias='World Wide Web'>WWW</sub> "
            "<emphasis level='strong'>now</emphasis></speak>"
        )
        == "First. Second! World Wide Web now"
    )
    assert prepare("<speak><emphasis>a</emphasis><voice name='x'>b</voice></speak>", JOE).notes == {"tags_removed": 2}


@pytest.mark.parametrize(
    "kind, fmt, text, words",
    [
        ("characters", None, "SSML", "S S M L"),
        ("spell-out", None, "a1", "A one"),
        ("cardinal", None, "1,234", "one thousand two hundred thirty-four"),
        ("cardinal", None, "-3.25", "minus three point two five"),
        ("ordinal", None, "21st", "twenty-first"),
        ("ordinal", None, "112", "one hundred twelfth"),
        ("date", None, "2024-03-05", "March fifth, twenty twenty-four"),
        ("date", "dmy", "05/03/1999", "March fifth, nineteen ninety-nine"),
        ("date", "y", "2005", "two thousand five"),
        ("telephone", None, "+1 (555) 010-2345", "plus one, five five five, zero one zero, two three four five"),
        ("date", None, "not a date", "not a date"),
        ("unknown-kind", None, "as is", "as is"),
    ],
)
def test_say_as_reads_the_text_as_its_kind(kind, fmt, text, words):
    attrs = f'interpret-as="{kind}"' + (f' format="{fmt}"' if fmt else "")
    assert said(f"<speak>x <say-as {attrs}>{text}</say-as> y</speak>") == f"x {words} y"


def test_prosody_rate_makes_its_own_piece_where_the_engine_can_change_rate():
    parts = prepare('<speak>a <prosody rate="slow">b</prosody> <prosody rate="150%">c</prosody></speak>', JOE).parts
    assert parts == [Speech("a", 1.0), Speech("b", 0.75), Speech("c", 1.5)]
    ignored = prepare('<speak>a <prosody rate="x-fast">b</prosody></speak>', TARA)
    assert ignored.parts == [Speech("a b", 1.0)] and ignored.notes == {"rate_ignored": 1}


@pytest.mark.parametrize(
    "doc, where",
    [
        (
            "<speak>Some <break time='500ms'/> SSML-looking text & ampersands < > \" '</speak>",
            r"line 1, column 53: not well-formed \(invalid token\); expected text or a tag \(write & as &amp;",
        ),
        ("<speak><s>One <p>two</s></speak>", "line 1, column 22: mismatched tag; expected </p>"),
        ("<speak>Hi", "line 1, column 9: no element found; expected </speak>"),
        ("<speak>\n<s>a</s>\n</spek>", "line 3, column 2: mismatched tag; expected </speak>"),
        ("<speak>a</speak> b", "junk after document element; expected nothing after </speak>"),
    ],
)
def test_malformed_ssml_fails_with_line_column_and_what_was_expected(doc, where):
    with pytest.raises(MarkupError, match=f"malformed SSML at {where}" if "line" in where[:5] else where):
        prepare(doc, JOE)


@pytest.mark.parametrize(
    "doc, message",
    [
        ('<speak>a <break time="soon"/></speak>', "expected a duration like 500ms or 2s"),
        ('<speak><prosody rate="warp">a</prosody></speak>', "expected x-slow, slow"),
        ("<speak><!DOCTYPE x>a</speak>", "may not declare a DOCTYPE"),
        ("<?xml version='1.0'?><speak xmlns='http://www.w3.org/2001/10/synthesis'><x/></speak>", None),
    ],
)
def test_ssml_values_outside_the_subset_fail_with_what_was_expected(doc, message):
    if message is None:  # a namespaced document is fine
        assert prepare(doc, JOE).notes == {"tags_removed": 1}
        return
    with pytest.raises(MarkupError, match=message):
        prepare(doc, JOE)


def test_html_like_tags_outside_speak_are_never_read_aloud_but_other_angle_brackets_are_text():
    assert said("<p>Hello <b>wor</b>ld</p><br/>Next &amp; <!-- a note -->more") == "Hello world Next & more"
    assert said("if a < b and c > d then 1<2") == "if a < b and c > d then 1<2"
    assert prepare("<i>x</i>", JOE).notes == {"tags_removed": 2}


def test_only_a_speak_element_makes_a_document_ssml():
    assert said("<speaker>Bob</speaker> says hi") == "Bob says hi"
    assert said("  <speak >Hi</speak>") == "Hi"
    assert said("<?xml version='1.0'?>\n<speak>Hi</speak>") == "Hi"


def test_an_engines_inline_tags_pass_through_to_it_and_are_dropped_for_others():
    line = "Well <laugh> that was funny <sigh/> ok </laugh>"
    assert said(line, TARA) == "Well <laugh> that was funny <sigh> ok"
    assert said(line, JOE) == "Well that was funny ok"
    assert said("<speak>Ha <laugh/> ha <cough/></speak>", TARA) == "Ha <laugh> ha"


def test_inline_tags_count_as_a_second_of_audio_not_as_their_characters():
    assert speech_seconds("<laugh>") == pytest.approx(1.0)
    assert speech_seconds("a" * 30 + "<laugh><sigh>") == pytest.approx(30 / 15 + 2.0)


# Characters -----------------------------------------------------------------------------------


def test_emoji_are_silent_by_default_and_read_when_asked():
    prepared = prepare("Emoji test 🙂🚆🎉 should not crash 👍🏽 ❤️ the synthesizer.", JOE)
    assert prepared.parts == [Speech("Emoji test should not crash the synthesizer.")]
    assert prepared.notes == {"emoji_dropped": 5}
    assert "🚆" in said("Emoji 🚆 test", read_emoji=True)


def test_characters_of_other_scripts_are_dropped_and_counted_latin_accents_kept():
    prepared = prepare("مرحبا بالعالم — mixed right-to-left text with English.", JOE)
    assert prepared.parts == [Speech("- mixed right-to-left text with English.")]
    assert prepared.notes == {"foreign_chars_dropped": 12}
    assert (
        said("Café déjà vu: naïve façade, Zürich, São Paulo, Kraków.")
        == "Café déjà vu: naïve façade, Zürich, São Paulo, Kraków."
    )
    assert said("Tokyo (東京) and Москва") == "Tokyo ( ) and"


def test_a_voice_of_an_undeclared_or_unknown_language_keeps_every_script():
    assert said("日本語 ok", VoiceProfile("custom")) == "日本語 ok"
    assert said("Москва", VoiceProfile("x", ("ru_RU",))) == "Москва"
    assert said("Москва ok", VoiceProfile("x", ("xx",))) == "Москва ok"


def test_a_line_with_nothing_left_to_say_names_the_voice_language_and_what_was_dropped():
    text = "日本語のテキストも含まれています。"
    prepared = prepare(text, JOE)
    assert prepared.pieces(400) == ([], [0.0])
    reason = unspeakable_reason(text, JOE, prepared.notes)
    assert "nothing speakable in line" in reason
    assert "voice 'joe' speaks en_US, and 16 characters of other scripts were dropped" in reason
    only_emoji = prepare("🎉🎉", JOE)
    assert "2 emoji are silent (SYNTH_READ_EMOJI=true" in unspeakable_reason("🎉🎉", JOE, only_emoji.notes)


def test_plain_text_passes_through_with_no_notes():
    prepared = prepare("  Dr. Smith paid 1,250 on 3/4 at 5 p.m.  ", JOE)
    assert prepared.parts == [Speech("Dr. Smith paid 1,250 on 3/4 at 5 p.m.")]
    assert prepared.notes == {}


@pytest.mark.parametrize(
    "text, words",
    [
        ("It cost $1,250.50 today.", "It cost 1,250 dollars and 50 cents today."),
        ("$1 or $5.01 or €20 or £3.99", "1 dollar or 5 dollars and 1 cent or 20 euros or 3 pounds and 99 pence"),
        ("a $1.5 million deal, ¥500", "a 1.5 million dollars deal, 500 yen"),
        ("Visit https://example.com/help?x=1.", "Visit example dot com slash help."),
        ("See www.python.org/downloads/ now", "See python dot org slash downloads now"),
        ("Mail first.last@mail.example.co.uk today", "Mail first dot last at mail dot example dot co dot uk today"),
    ],
)
def test_money_web_and_email_addresses_become_words(text, words):
    prepared = prepare(text, JOE)
    assert said(text) == words and prepared.notes["readings_expanded"] >= 1


def test_pieces_split_long_text_and_drop_pieces_with_nothing_to_say():
    long = " ".join(["A sentence of words."] * 10)
    chunks, pauses = prepare(f"<speak>{long}<break time='1s'/>...</speak>", JOE).pieces(50)
    assert len(chunks) == 5 and all(len(c.text) <= 50 for c in chunks)
    assert pauses == [0.0] * 5 + [1.0]  # the "..." after the break is not a piece


# Numbers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, words",
    [
        (0, "zero"),
        (15, "fifteen"),
        (40, "forty"),
        (99, "ninety-nine"),
        (101, "one hundred one"),
        (2_000_017, "two million seventeen"),
    ],
)
def test_cardinal_numbers(n, words):
    assert numbers.cardinal(n) == words


@pytest.mark.parametrize(
    "n, words",
    [
        (1, "first"),
        (2, "second"),
        (3, "third"),
        (5, "fifth"),
        (12, "twelfth"),
        (20, "twentieth"),
        (43, "forty-third"),
        (100, "one hundredth"),
    ],
)
def test_ordinal_numbers(n, words):
    assert numbers.ordinal(n) == words


@pytest.mark.parametrize(
    "n, words",
    [
        (1999, "nineteen ninety-nine"),
        (1905, "nineteen oh five"),
        (1900, "nineteen hundred"),
        (2000, "two thousand"),
        (2024, "twenty twenty-four"),
    ],
)
def test_years(n, words):
    assert numbers.year(n) == words


def test_one_of_a_kind_is_counted_in_the_singular():
    only_emoji = prepare("\U0001f389", JOE)
    assert "1 emoji is silent (SYNTH_READ_EMOJI=true" in unspeakable_reason("\U0001f389", JOE, only_emoji.notes)
    notes = {"jobs": 1, "ssml_breaks": 1, "tags_removed": 1, "readings_expanded": 1, "foreign_chars_dropped": 1}
    assert describe_text_notes(notes) == (
        "text: 1 character of other scripts dropped, 1 tag removed, "
        "1 amount, URL or e-mail address in words, 1 SSML break (in 1 job)"
    )
    notes = {"jobs": 2, "ssml_breaks": 2, "tags_removed": 3}
    assert describe_text_notes(notes) == "text: 3 tags removed, 2 SSML breaks (in 2 jobs)"
