"""Orpheus-family TTS: a Llama-type causal LM that emits SNAC 24 kHz codec tokens.

The package in layers, each importing only those below it (tests/test_code_layout.py):

    engine.py        the ``Engine`` the worker runs: admission, the loop's boot, final chunks
    serving/         continuous batching: scheduler (no torch), runner, graphs, loop, stats
    model/           the language model: decoder and KV cache, sampling, quant, device, loading
    codec/           SNAC: codes, the codec and its graphs, the chunk grid, the codec's lanes
    kernels/         the Triton kernels, each beside its torch reference
    config.py, vocab.py, prompt.py, rng.py, fallbacks.py   shared by every layer

beside them reference.py (transformers ``generate()`` and the reference loop: the tests' oracle
and the benchmark's baseline, never a serving path) and tiny.py (make-tiny). Importing this
package imports no torch.
"""
