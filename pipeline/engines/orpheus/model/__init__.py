"""The language model: our forward pass over a transformers Llama checkpoint and what it runs on.

decoder (prefill, the decode step and the mixed step), kv_cache (its preallocated KV cache),
sampling (the keyed draw), quant (linear layers swapped for quantized ones), device (device,
dtype, rows that fit), loading (checkpoint, tokenizer and codec onto one device).
"""
