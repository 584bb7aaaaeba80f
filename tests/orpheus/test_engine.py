"""The engine through the spine's contract: registry, settings, chunks, errors."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.constants import SNAC_SAMPLES_PER_FRAME
from pipeline.engines.base import SynthesisRequest
from pipeline.engines.orpheus.engine import OrpheusEngine, token_budget
from pipeline.errors import EngineError


@pytest.fixture(scope="module")
def engine(engine_settings):
    from pipeline.engines.registry import load_engine

    eng = load_engine(engine_settings())
    yield eng
    eng.close()


def collect(chunks):
    by_key, finals = {}, {}
    for c in chunks:
        assert c.key not in finals, "a chunk after the final one"
        by_key.setdefault(c.key, []).append(c.audio)
        if c.final:
            finals[c.key] = c
    return {k: np.concatenate(v) for k, v in by_key.items()}, finals


def test_info_records_device_dtype_and_quantization(engine):
    info = engine.info  # built by the registry from EngineSettings, as the worker does
    assert info.name == "orpheus" and info.sample_rate == 24_000 and info.quantization == "none"
    assert info.voices[0] == "tara" and info.max_batch == 4
    assert info.extra["dtype"] == "float32" and info.extra["random_weights"] is True
    assert info.extra["codec_dtype"] == "float32"
    assert info.device_type  # the CPU model name


def test_the_job_records_one_list_of_fallbacks_that_the_engine_parts_add_to(engine):
    """The loader's fallbacks, then those of the sampler and the graphs (none on the CPU): one
    list, the runner's, which its parts are handed."""
    runner = engine.loop.runner
    assert runner.sampler.fallbacks is runner.fallbacks
    assert engine.info.extra["fallbacks"] == runner.fallbacks == engine.lm.fallbacks == []


@pytest.fixture(scope="module")
def quick(tiny):
    """The same engine class on the session's model, with short budgets (random weights never stop)."""
    return OrpheusEngine(tiny, max_batch=4, budget_slack=0.5, budget_min=42)


def test_every_request_ends_with_one_final_chunk_and_bad_ones_fail_alone(quick):
    engine = quick
    reqs = [
        SynthesisRequest("a", "Hello there.", "tara", seed=1),
        SynthesisRequest("bad-voice", "Hello.", "nobody"),
        SynthesisRequest("empty", "   ", "leo"),
        SynthesisRequest("b", "A second, longer line of text.", "leo", seed=2, realtime=True),
    ]
    audio, finals = collect(engine.synthesize(reqs))
    assert set(finals) == {"a", "b", "bad-voice", "empty"}
    assert isinstance(finals["bad-voice"].error, EngineError)
    assert isinstance(finals["empty"].error, EngineError)
    for key in "ab":
        assert finals[key].error is None
        assert audio[key].dtype == np.float32 and np.abs(audio[key]).max() <= 1.0
        assert len(audio[key]) % SNAC_SAMPLES_PER_FRAME == 0 and len(audio[key]) > 0


def test_a_job_renders_the_same_audio_alone_and_in_a_batch(quick):
    engine = quick
    req = SynthesisRequest("x", "Reproducible, whoever shares the batch.", "mia", seed=9)
    others = [SynthesisRequest(f"o{i}", "Some neighbour " * (i + 1), "dan", seed=i) for i in range(3)]
    alone, _ = collect(engine.synthesize([req]))
    crowd, _ = collect(engine.synthesize([*others, req]))
    np.testing.assert_allclose(alone["x"], crowd["x"], rtol=0, atol=1e-5)


def test_budget_stop_is_an_error_for_a_real_model(tiny):
    eng = OrpheusEngine(tiny, max_batch=2, budget_policy="error", budget_min=21)
    _audio, finals = collect(eng.synthesize([SynthesisRequest("r", "Hi.", "tara", seed=3)]))
    assert isinstance(finals["r"].error, EngineError) and "budget" in str(finals["r"].error)
    assert eng.stats["budget_stops"] == 1


def test_a_random_checkpoint_asks_for_its_budgets_and_prompt_lengths_and_a_released_one_gets_the_engines(tiny):
    """make-tiny's config.json says what its random weights and byte-level tokenizer need (jobs
    keep their audio at a budget of the expected speech, longer prompt graphs); a checkpoint that
    says nothing is served as a released one is."""
    from dataclasses import replace

    from pipeline.engines.orpheus.engine import BUDGET_SLACK
    from pipeline.engines.orpheus.model.loading import ServingHints
    from pipeline.engines.orpheus.serving.graphs import LENGTHS
    from pipeline.engines.orpheus.tiny import RANDOM_SERVING

    assert tiny.serving == RANDOM_SERVING
    asked = OrpheusEngine(tiny, max_batch=2)
    released = OrpheusEngine(replace(tiny, serving=ServingHints()), max_batch=2)
    try:
        assert (asked.budget[0], asked.budget_policy) == (1.0, "keep")
        assert asked.loop.runner.mixed_lengths == RANDOM_SERVING.prefill_lengths
        assert (released.budget[0], released.budget_policy) == (BUDGET_SLACK, "error")
        assert released.loop.runner.mixed_lengths == LENGTHS
    finally:
        asked.close()
        released.close()


def test_a_hint_the_engine_does_not_know_is_refused():
    from pipeline.engines.orpheus.model.loading import ServingHints

    assert ServingHints.from_config({"prefill_lengths": [64, 32]}).prefill_lengths == (32, 64)
    with pytest.raises(ValueError, match="unknown synth_serving hint budget_slak"):
        ServingHints.from_config({"budget_slak": 1.0})


def test_budget_grows_with_text_in_whole_frames():
    short, long = token_budget("Hi."), token_budget("word " * 200)
    assert token_budget("word " * 100_000) == 8190
    assert short % 7 == 0 and long % 7 == 0 and long > short


def test_paths_switched_off_in_the_settings_are_off_in_the_runner(engine_settings, monkeypatch):
    """SYNTH_ORPHEUS_DISABLE reaches the parts the engine builds (no environment read there)."""
    from pipeline.engines.orpheus.kernels import fused
    from pipeline.engines.registry import load_engine
    from pipeline.settings import Settings

    monkeypatch.setenv("SYNTH_ORPHEUS_DISABLE", "mixed_steps,fused_sampler")
    config = Settings().orpheus_config()
    eng = load_engine(engine_settings(orpheus=config))
    try:
        runner = eng.loop.runner
        assert runner.mixed_sizes == () and runner.sampler.fused is None
        assert runner.decoder.ops is fused.ops_for("cpu")
    finally:
        eng.close()
    on = load_engine(engine_settings())
    try:
        assert on.loop.runner.mixed_sizes  # on the CPU mixed steps run eagerly
    finally:
        on.close()


def test_a_bf16_codec_set_in_the_settings_renders_and_is_recorded(engine_settings):
    """SYNTH_CODEC_DTYPE reaches the codec, every job records it, and a job still renders."""
    from pipeline.engines.registry import load_engine

    eng = load_engine(engine_settings(codec_dtype="bfloat16"))
    try:
        assert eng.info.extra["codec_dtype"] == "bfloat16" and eng.lm.codec.dtype == "bfloat16"
        audio, finals = collect(eng.synthesize([SynthesisRequest("a", "Hello there.", "tara", seed=1)]))
        assert finals["a"].error is None and audio["a"].dtype == np.float32 and np.abs(audio["a"]).max() > 0
    finally:
        eng.close()


def test_no_model_set_and_no_hub_access_says_to_set_synth_model_and_why(engine_settings):
    """The default model is a hub id; this conftest runs with HF_HUB_OFFLINE=1, as a machine
    without hub access does."""
    from pipeline.engines.registry import load_engine
    from pipeline.errors import EngineUnavailableError

    with pytest.raises(EngineUnavailableError) as raised:
        load_engine(engine_settings(model=None))
    message = str(raised.value)
    assert "(the default when SYNTH_MODEL is not set)" in message and "\n" not in message
    assert "set SYNTH_MODEL to a local checkpoint folder or a hub id" in message
    assert "synth models make-tiny DIR" in message
    assert "offline" in message  # transformers' reason is kept


@pytest.mark.parametrize(
    "codec, named",
    [
        ("/nowhere/snac", "(SYNTH_CODEC)"),
        (None, "has no snac/ folder"),
    ],
)
def test_a_codec_that_cannot_load_names_synth_codec(engine_settings, tiny_dir, tmp_path, codec, named):
    """A checkpoint folder without snac/ falls back to the hub's codec, which a machine without
    hub access (HF_HUB_OFFLINE=1 here) cannot fetch; either way the user is told what to set."""
    import shutil

    from pipeline.engines.registry import load_engine
    from pipeline.errors import EngineUnavailableError

    bare = tmp_path / "no-snac"
    shutil.copytree(tiny_dir, bare, ignore=shutil.ignore_patterns("snac"))
    with pytest.raises(EngineUnavailableError) as raised:
        load_engine(engine_settings(model=str(bare), codec=codec))
    message = str(raised.value)
    assert named in message and "\n" not in message
    assert "set SYNTH_CODEC to a local SNAC folder" in message


def test_cuda_asked_for_on_a_machine_without_it_names_synth_device(engine_settings):
    import torch

    from pipeline.engines.registry import load_inline
    from pipeline.errors import EngineUnavailableError

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(EngineUnavailableError, match=r"SYNTH_DEVICE=cuda .*set SYNTH_DEVICE=auto or cpu"):
        load_inline(engine_settings(device="cuda"))
