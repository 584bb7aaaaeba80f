import pytest

from pipeline.text import estimate_seconds, has_speakable_content, normalize, split_chunks


def test_normalize_folds_typography_and_space():
    assert normalize("  \u201cHi\u201d \u2014 it\u2019s\tfine\u2026 \x07 ") == '"Hi" - it\'s fine...'


def test_short_text_is_one_chunk():
    assert split_chunks("Hello there. Bye.", 400) == ["Hello there. Bye."]


def test_sentences_are_packed_up_to_the_limit():
    text = " ".join(f"Sentence number {i} is here." for i in range(40))
    chunks = split_chunks(text, 120)
    assert all(len(c) <= 120 for c in chunks)
    assert all(c.endswith(".") for c in chunks)  # split at sentence ends only
    assert " ".join(chunks) == text  # nothing lost or reordered


def test_long_sentence_splits_at_clauses_then_words():
    clause = "a clause with several words in it"
    text = ", ".join([clause] * 10) + "."
    chunks = split_chunks(text, 80)
    assert all(len(c) <= 80 for c in chunks)
    assert " ".join(chunks).replace(" ", "") == text.replace(" ", "")
    one_word = "x" * 250
    assert split_chunks(one_word, 100) == ["x" * 100, "x" * 100, "x" * 50]


@pytest.mark.parametrize("text,expected", [("hello", True), ("--- ...", False), ("42", True), ("", False)])
def test_speakable(text, expected):
    assert has_speakable_content(text) is expected


def test_estimate_seconds_is_linear_in_length():
    assert estimate_seconds("x" * 150) == pytest.approx(10.0)


def test_estimate_seconds_leaves_markup_out():
    assert estimate_seconds("<speak>" + "x" * 150 + "<break time='1s'/></speak>") == pytest.approx(10.0)
