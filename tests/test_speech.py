"""The speech is real: synthesize known sentences, transcribe them offline, bound the word error rate."""

import numpy as np
import pytest

from pipeline import audio
from pipeline.engines.base import SynthesisRequest
from tests.speech import transcribe, word_error_rate

pytest.importorskip("pocketsphinx")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "Mind the gap between the train and the platform.",
]
# Measured 2026-11-21: 3 errors in 33 words (0.09). The bound leaves room for recognizer noise, and
# the reversed-audio control below shows it still separates speech from non-speech.
MAX_WER = 0.25


def render(engine, text: str) -> np.ndarray:
    chunks = list(engine.synthesize([SynthesisRequest("k", text, "joe")]))
    assert chunks[-1].final and chunks[-1].error is None
    return np.concatenate([c.audio for c in chunks])


def test_word_error_rate_helper():
    assert word_error_rate("a b c d", "a x c") == pytest.approx(0.5)


@pytest.mark.slow
def test_piper_speech_is_intelligible(piper_engine):
    rate = piper_engine.info.sample_rate
    errors = words = 0
    control = []
    for sentence in SENTENCES:
        samples = render(piper_engine, sentence)
        hyp = transcribe(audio.encode(samples, rate, "flac"))  # through our encoder, as users get it
        errors += word_error_rate(sentence, hyp) * len(sentence.split())
        words += len(sentence.split())
        control.append(word_error_rate(sentence, transcribe(audio.encode(samples[::-1].copy(), rate, "wav"))))
    assert errors / words <= MAX_WER
    assert min(control) > 0.6  # reversed speech is not recognized: the bound is meaningful


def test_piper_speaks_slower_at_a_lower_rate_and_says_the_same_words(piper_engine):
    sentence = SENTENCES[2]
    normal = render(piper_engine, sentence)
    chunks = list(piper_engine.synthesize([SynthesisRequest("k", sentence, "joe", rate=0.5)]))
    slow = np.concatenate([c.audio for c in chunks])
    # phonemes last twice as long; the pauses Piper puts around a sentence stretch less
    assert piper_engine.info.rate_control and 1.4 < slow.size / normal.size < 2.4
    hyp = transcribe(audio.encode(slow, piper_engine.info.sample_rate, "flac"))
    assert word_error_rate(sentence, hyp) <= 0.7, hyp  # measured 0.11-0.44 over 8 renders
