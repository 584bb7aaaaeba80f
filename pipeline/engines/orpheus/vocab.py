"""The Orpheus token layout, defined once (canopyai/Orpheus-TTS: engine_class.py, decoder.py).

Llama-3 text ids sit below 128256; ``<custom_token_N>`` is id 128256 + N. Orpheus uses custom tokens
0..9 as control tokens and custom tokens 10.. as audio: position ``p`` of a 7-token frame owns the
4096-wide range starting at ``AUDIO_TOKEN_BASE + p * SNAC_CODEBOOK_SIZE``.
"""

from __future__ import annotations

from pipeline.constants import SNAC_TOKENS_PER_FRAME

BEGIN_OF_TEXT = 128000  # <|begin_of_text|>, the Llama-3 BOS the tokenizer adds
END_OF_TEXT = 128009  # <|eot_id|>
CUSTOM_TOKEN_BASE = 128256  # <custom_token_0>
START_OF_SPEECH = 128257  # <custom_token_1>
END_OF_SPEECH = 128258  # <custom_token_2>: generation stops here
START_OF_HUMAN = 128259  # <custom_token_3>
END_OF_HUMAN = 128260  # <custom_token_4>
START_OF_AI = 128261  # <custom_token_5>
END_OF_AI = 128262  # <custom_token_6>
PAD = 128263  # <custom_token_7>
AUDIO_TOKEN_BASE = 128266  # <custom_token_10>

SNAC_CODEBOOK_SIZE = 4096
AUDIO_TOKEN_END = AUDIO_TOKEN_BASE + SNAC_TOKENS_PER_FRAME * SNAC_CODEBOOK_SIZE  # 156938, exclusive
VOCAB_SIZE = 156_940  # the released checkpoints' embedding rows

# Control tokens the model may emit before audio starts; skipped, not counted as invalid.
CONTROL_TOKENS = frozenset({START_OF_SPEECH, START_OF_AI, END_OF_HUMAN, END_OF_AI, PAD})

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")
LANGUAGE = "en"  # the released voices speak English
# Inline tags the finetuned model performs (canopyai's README); they stay in the prompt's text.
INLINE_TAGS = ("laugh", "chuckle", "sigh", "cough", "sniffle", "groan", "yawn", "gasp")


def audio_range(position: int) -> tuple[int, int]:
    """The [start, end) token ids allowed at ``position`` (0..6) of a frame."""
    start = AUDIO_TOKEN_BASE + position * SNAC_CODEBOOK_SIZE
    return start, start + SNAC_CODEBOOK_SIZE
