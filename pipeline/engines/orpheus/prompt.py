"""Prompt ids as Orpheus builds them.

canopyai's vLLM engine (engine_class._format_prompt) sends
``[START_OF_HUMAN] + tokenizer("{voice}: {text}") + [END_OF_TEXT, END_OF_HUMAN, START_OF_AI,
START_OF_SPEECH]``: the model's first generated token is already audio. (Their transformers notebook
stops after END_OF_HUMAN and lets the model emit START_OF_AI, START_OF_SPEECH itself; ending the prompt
with them makes every generated token an audio token, which the code-position logic relies on.)
"""

from __future__ import annotations

from pipeline.engines.orpheus.vocab import (
    END_OF_HUMAN,
    END_OF_TEXT,
    START_OF_AI,
    START_OF_HUMAN,
    START_OF_SPEECH,
)

PROMPT_SUFFIX = (END_OF_TEXT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH)


def prompt_ids(tokenizer, text: str, voice: str) -> list[int]:
    """The token ids of one request's prompt; the tokenizer adds its BOS as Llama-3's does."""
    body = tokenizer(f"{voice}: {text}")["input_ids"]
    return [START_OF_HUMAN, *body, *PROMPT_SUFFIX]
