"""Orpheus-family TTS: a Llama-type causal LM that emits SNAC 24 kHz codec tokens.

Modules by concern: vocab (token ids, voices), prompt, codes (token -> SNAC levels, validation),
codec (SNAC loading, deterministic noise), streaming (windowed decoder), sampling, generate (batched
KV-cache loop and the transformers ``generate()`` reference), quant, device, loading, tiny (make-tiny),
engine (the ``Engine`` the worker runs), config (its frozen configuration). Importing this package
imports no torch.
"""
