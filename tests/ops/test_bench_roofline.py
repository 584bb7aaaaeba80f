"""The roofline table's arithmetic: the weights it counts are the decoder's own linear layers plus
the scored slice of the head, and a step's KV and FLOPs grow with rows and length as the table says."""

import pytest

from ops.bench.kernels.roofline import Shapes, audio_s_per_step, step_cost

torch = pytest.importorskip("torch")


def test_the_counted_weights_are_the_models_linear_layers_and_the_scored_head():
    from transformers import LlamaForCausalLM

    from pipeline.engines.orpheus.tiny import tiny_llama_config

    config = tiny_llama_config()
    model = LlamaForCausalLM(config)
    width = 40
    linear = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    shapes = Shapes.of(config, width)
    assert shapes.linear_params() == linear + width * config.hidden_size


def test_a_step_of_orpheus_3b_shapes_at_255_rows():
    """The figures issue 34 starts from: about 5.8 GB of bf16 weights over the audio-code slice,
    about 5 GB of fp8 KV at 350 positions a row, about 1.5 TFLOP, and 3.1 s of audio a step."""
    shapes = Shapes(3072, 8192, 28, 24, 8, 128, 156_940 - 128_256)
    cost = step_cost(shapes, 255, 350)
    assert cost.weight_gb == pytest.approx(5.81, abs=0.01)
    assert cost.kv_gb == pytest.approx(255 * 350 * 28 * 2 * 8 * 128 / 1e9)
    assert cost.tflop == pytest.approx(1.51, abs=0.01)
    assert step_cost(shapes, 510, 350).kv_gb == pytest.approx(2 * cost.kv_gb)
    assert step_cost(shapes, 255, 700, kv_bytes=2).kv_gb == pytest.approx(4 * cost.kv_gb)
    assert audio_s_per_step(255) == pytest.approx(255 / 7 * 2048 / 24_000)


def test_busy_time_counts_overlapping_kernels_once():
    from ops.bench.orpheus.profile import busy_ms

    ns = 1_000_000
    assert busy_ms([(0, 10 * ns), (5 * ns, 20 * ns), (30 * ns, 40 * ns), (35 * ns, 36 * ns)]) == 30
    assert busy_ms([]) == 0
