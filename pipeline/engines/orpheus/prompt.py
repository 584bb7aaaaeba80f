"""Prompt ids as Orpheus builds them.

canopyai's vLLM engine (engine_class._format_prompt) sends
``[START_OF_HUMAN] + tokenizer("{voice}: {text}") + [END_OF_TEXT, END_OF_HUMAN, START_OF_AI,
START_OF_SPEECH]``: the model's first generated token is already audio. (Their transformers notebook
stops after END_OF_HUMAN and lets the model emit START_OF_AI, START_OF_SPEECH itself; ending the prompt
with them makes every generated token an audio token, which the code-position logic relies on.)
"""

from __future__ import annotations

from pipeline.engines.orpheus.vocab import (
    BEGIN_OF_TEXT,
    END_OF_HUMAN,
    END_OF_TEXT,
    START_OF_AI,
    START_OF_HUMAN,
    START_OF_SPEECH,
)
from pipeline.errors import EngineUnavailableError

PROMPT_SUFFIX = (END_OF_TEXT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH)


def prompt_ids(tokenizer, text: str, voice: str) -> list[int]:
    """The token ids of one request's prompt; the tokenizer adds its BOS as Llama-3's does."""
    body = tokenizer(f"{voice}: {text}")["input_ids"]
    return [START_OF_HUMAN, *body, *PROMPT_SUFFIX]


def check_prompt_start(tokenizer, source: str) -> None:
    """Refuse a tokenizer whose prompts do not start ``[START_OF_HUMAN, BEGIN_OF_TEXT]`` followed by
    text: the model was trained on exactly that, and a missing or doubled BOS still yields audio
    tokens, just worse ones, so nothing downstream would notice."""
    ids = prompt_ids(tokenizer, "Hello.", "tara")
    want = [START_OF_HUMAN, BEGIN_OF_TEXT]
    if ids[:2] != want or ids[2] == BEGIN_OF_TEXT:
        raise EngineUnavailableError(
            f"the tokenizer of {source!r} makes prompts that start {ids[:3]}; Orpheus expects "
            f"{want} (start of human, then the tokenizer's BOS <|begin_of_text|>) and then the "
            "text: use the checkpoint's own tokenizer, which adds exactly one BOS"
        )
