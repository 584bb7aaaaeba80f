"""The engine refuses a tokenizer whose prompts do not start [START_OF_HUMAN, BOS]: a missing or
doubled BOS still makes audio tokens on a real checkpoint, only worse ones, and random weights
cannot tell the difference."""

from __future__ import annotations

import shutil

import pytest
from tokenizers import processors

from pipeline.engines.orpheus.model.loading import load
from pipeline.engines.orpheus.prompt import check_prompt_start, prompt_ids
from pipeline.engines.orpheus.tiny import build_tokenizer
from pipeline.engines.orpheus.vocab import BEGIN_OF_TEXT, START_OF_HUMAN
from pipeline.errors import EngineUnavailableError

BOS = "<|begin_of_text|>"


def tokenizer_with(template: str):
    """The tiny tokenizer with its BOS template replaced (``$A`` is the text)."""
    tokenizer = build_tokenizer()
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[(BOS, BEGIN_OF_TEXT)] if BOS in template else []
    )
    return tokenizer


def test_the_tiny_tokenizer_makes_prompts_that_start_with_start_of_human_then_bos():
    tokenizer = build_tokenizer()
    assert prompt_ids(tokenizer, "Hi", "tara")[:3] == [START_OF_HUMAN, BEGIN_OF_TEXT, tokenizer("t")["input_ids"][1]]
    check_prompt_start(tokenizer, "tiny")


@pytest.mark.parametrize("template", ["$A", f"{BOS} {BOS} $A"], ids=["no-bos", "double-bos"])
def test_a_tokenizer_without_exactly_one_bos_is_refused_with_the_ids_it_makes(template):
    with pytest.raises(EngineUnavailableError, match=r"start \[128259, .*expects \[128259, 128000\]"):
        check_prompt_start(tokenizer_with(template), "bad")


def test_loading_a_checkpoint_whose_tokenizer_adds_no_bos_fails_before_the_weights(tiny_dir, tmp_path):
    broken = tmp_path / "no-bos"
    shutil.copytree(tiny_dir, broken)
    tokenizer_with("$A").save_pretrained(broken)
    with pytest.raises(EngineUnavailableError, match="no-bos.*start of human, then the tokenizer's BOS"):
        load(str(broken), None, "float32", "none", "cpu")
