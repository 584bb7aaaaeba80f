"""What the Orpheus engine tells the text front end, and what it does with an inline tag."""

from __future__ import annotations

import math

from pipeline.constants import CHARS_PER_SECOND, LM_TOKENS_PER_AUDIO_SECOND
from pipeline.engines.orpheus.config import OrpheusConfig
from pipeline.engines.orpheus.engine import BUDGET_SLACK, OrpheusEngine, token_budget
from pipeline.engines.orpheus.prompt import prompt_ids
from pipeline.engines.orpheus.vocab import INLINE_TAGS
from pipeline.textfront import prepare


def test_the_engine_declares_english_voices_and_its_inline_tags(tiny):
    eng = OrpheusEngine(tiny, OrpheusConfig(context=256), voices=("tara", "leo"), max_batch=1)
    eng.close()
    profile = eng.info.profile("leo")
    assert profile.languages == ("en",) and profile.inline_tags == frozenset(INLINE_TAGS)
    assert not profile.rate_control
    assert prepare("Oh <gasp> no 🙂", profile).parts[0].text == "Oh <gasp> no"


def test_an_inline_tag_reaches_the_prompt_as_its_own_text(tiny):
    ids = prompt_ids(tiny.tokenizer, "Oh <laugh> no", "tara")
    assert tiny.tokenizer.decode(ids[2:-4]) == "tara: Oh <laugh> no"


def test_an_inline_tag_counts_as_a_second_of_audio_in_the_budget_not_as_its_characters():
    words = "x" * 300  # 20 s of expected speech: over the minimum budget
    per_second = LM_TOKENS_PER_AUDIO_SECOND * BUDGET_SLACK
    with_tags = token_budget(words + "<laugh><sigh><groan><yawn>")
    assert with_tags == 7 * math.ceil((300 / CHARS_PER_SECOND + 4.0) * per_second / 7)
    assert token_budget(words + "<sniffle>") == token_budget(words + "<sigh>")  # not its length
