"""What the fp8 KV cache (KVCache(kv_dtype="fp8")) costs against the bf16 cache it came from, at
Orpheus-3B shapes (CUDA, sm_89 or later): decode attention's relative L2 error over random data,
a decoder's logits (a random 28-layer model, ``--model`` a checkpoint) over an fp8 cache against a
bf16 one, on SDPA and on the per-row kernel, with fp8 weights against bf16 beside it for scale;
then attention over both caches timed at 256 rows of about 1000 tokens, in GB/s of K and V read.
The bounds these stay within are tested in tests/orpheus/kernels/test_kv8_kernels.py.

    python -m ops.bench.kernels kv8 [--model DIR] [--batches 8 64]
"""

from __future__ import annotations

import argparse

import torch

from ops.bench.kernels.checking import HEAD_DIM, HEADS, KV_HEADS, quantized, random_model
from ops.bench.timing import median_device_ms
from pipeline.engines.orpheus.kernels import attention, fused
from pipeline.engines.orpheus.model.decoder import Decoder
from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.model.quant import quantize
from pipeline.engines.orpheus.tiny import ORPHEUS_3B
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

TIMED_BATCH, TIMED_LEN = 256, 1000
SCALES = ((1.0, 1.0), (0.5, 2.0))  # (k_scale, v_scale): the default and powers of two


def rel_l2(got, want) -> float:
    g, w = got.float(), want.float()
    return ((g - w).norm() / w.norm().clamp_min(1e-30)).item()


def attention_inputs(b: int, length: int, dtype):
    q = torch.randn(b, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM, dtype=dtype, device="cuda")
    k, v = (
        torch.randn(b, KV_HEADS, length + 1, HEAD_DIM, dtype=dtype, device="cuda") for _ in range(2)
    )  # [B, Hkv, T+1, D]
    lens = torch.randint(length * 9 // 10, length + 1, (b,), device="cuda")
    return q, k, v, lens


def attention_error(b: int, length: int, dtype) -> None:
    q, k, v, lens = attention_inputs(b, length, dtype)
    scale = HEAD_DIM**-0.5
    plain = attention.decode_attention(q, k, v, lens, scale)
    for ks, vs in SCALES:
        (k8, v8), _ = quantized((k, v), ks, vs, dtype)
        err = rel_l2(attention.decode_attention(q, k8, v8, lens, scale * ks, vs), plain)
        print(f"  attention fp8 against bf16 B={b} ~{length} tokens s={ks},{vs}: rel L2 {err:.3e}", flush=True)


def time_attention(b: int, length: int, dtype) -> None:
    q, k, v, lens = attention_inputs(b, length, dtype)
    (k8, v8), _ = quantized((k, v), 1.0, 1.0, dtype)
    cells = []
    for name, kc, vc in ((str(dtype)[6:], k, v), ("fp8", k8, v8)):
        ms = median_device_ms(lambda: attention.decode_attention(q, kc, vc, lens, HEAD_DIM**-0.5))
        read = 2 * lens.sum().item() * KV_HEADS * HEAD_DIM * kc.element_size()
        cells.append(f"{name} {ms * 1e3:7.1f} us ({read / ms / 1e6:5.0f} GB/s of {read / 1e9:.2f} GB)")
    print(f"  decode_attention B={b} rows ~{length} tokens, one layer: " + "   ".join(cells), flush=True)


def step_logits(decoder, ids, prompt: int, per_row: bool) -> list:
    """Prefill ``ids[:, :prompt]`` into rows 0..N-1, then decode the rest teacher-forced: the
    prefill's logits and each step's."""
    n, dev = ids.shape[0], ids.device
    out = [
        decoder.prefill(
            ids[:, :prompt],
            torch.zeros(n, dtype=torch.long, device=dev),
            torch.full((n,), prompt, device=dev),
            torch.arange(n, device=dev),
            prompt,
        )
    ]
    for t in range(prompt, ids.shape[1]):
        out.append(decoder.decode(ids[:, t], torch.full((n,), t, device=dev), t + 1, per_row))
    return out


def worst(got: list, want: list) -> float:
    return max(rel_l2(g, w) for g, w in zip(got, want))


def decoder_error(model, batches, prompt: int, fp8_weights=None) -> None:
    """Logits over an fp8 cache against a bf16 cache, prefill and 4 teacher-forced steps; with
    ``fp8_weights`` (the same model, quant.py's fp8), its logits over a bf16 cache against the
    same reference: a mode the engine already ships."""
    n, steps, cfg = max(batches), 4, model.config

    def decoder(m, kv_dtype):
        cache = KVCache(
            cfg.num_hidden_layers, n + 1, cfg.num_key_value_heads, 512, HEAD_DIM, m.dtype, m.device, kv_dtype
        )
        return Decoder(m, cache, CUSTOM_TOKEN_BASE, ops=fused.TRITON)

    plain, fp8 = decoder(model, None), decoder(model, "fp8")
    print(f"decoder, {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size} ({n} rows, prompt {prompt}):", flush=True)
    ids = torch.randint(CUSTOM_TOKEN_BASE, cfg.vocab_size, (n, prompt + steps), device=model.device)
    with torch.inference_mode():
        for b in batches:
            for per_row in (False, True):
                err = worst(step_logits(fp8, ids[:b], prompt, per_row), step_logits(plain, ids[:b], prompt, per_row))
                print(
                    f"  logits fp8 against bf16 cache B={b} ({'per-row kernel' if per_row else 'SDPA'}): "
                    f"rel L2 {err:.3e}",
                    flush=True,
                )
        k, v = (c[:, :n].abs().max().item() for c in (plain.cache.k, plain.cache.v))
        print(f"  largest |K| {k:.2f}, |V| {v:.2f} written (e4m3 saturates at 448)", flush=True)
        if fp8_weights is not None:
            err = worst(
                step_logits(decoder(fp8_weights, None), ids, prompt, False), step_logits(plain, ids, prompt, False)
            )
            print(f"  for scale, fp8 weights (bf16 cache) against bf16 B={n} (SDPA): {err:.3e}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 64], help="decoder batches")
    ap.add_argument("--layers", type=int, default=ORPHEUS_3B["num_hidden_layers"], help="random decoder's layers")
    ap.add_argument(
        "--model", help="a checkpoint folder for the decoder (default: random weights at Orpheus-3B shapes)"
    )
    args = ap.parse_args(argv)
    dtype = torch.bfloat16
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
    torch.manual_seed(0)
    print("decode_attention:", flush=True)
    for b in (1, TIMED_BATCH):
        attention_error(b, TIMED_LEN, dtype)
    time_attention(TIMED_BATCH, TIMED_LEN, dtype)

    def model():
        if args.model:
            from pipeline.engines.orpheus.model.loading import load_lm

            return load_lm(args.model, "bfloat16", "cuda")[1]
        return random_model(args.layers, dtype, "cuda")  # seeded: the same weights each call

    fp8_weights = model()
    if quantize(fp8_weights, "fp8", "cuda", dtype).applied != "fp8":
        fp8_weights = None  # the reason is logged
    decoder_error(model(), args.batches, 200, fp8_weights)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
