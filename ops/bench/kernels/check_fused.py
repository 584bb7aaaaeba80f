"""fused.py's Triton kernels against their torch references, then the decoder's fused decode step
against the unfused torch one, at Orpheus-3B shapes on random bf16 data, with timings.

Run on a CUDA machine with Triton (the project's GPU install):

    .venv/bin/python -m ops.bench.kernels.check_fused

Per kernel and batch it prints the max abs error, the relative L2 error and the median of 50 timed
calls (torch.cuda.Event around each) of the kernel and of the reference. Then a 2-layer random model
at Orpheus-3B widths: prefill and decode logits of ``Decoder`` with fused weights and the Triton ops
against ``Decoder(fuse=False, ops=REFERENCE)``, eager and replayed as a CUDA graph. Then (``--step``,
on by default on CUDA) the full 28-layer decode step as a CUDA graph, fused against unfused, at each
batch. Exits 1 when an error passes its tolerance (TOLERANCE below), 2 when Triton is missing.

``--device cpu`` with ``TRITON_INTERPRET=1`` runs the same checks in Triton's interpreter, on a
machine without a GPU (tests/orpheus/test_fused.py does, where Triton is installed); no timings.
It defaults to float32 there: the interpreter truncates fp32 -> bf16 casts where the GPU rounds to
nearest even, so in bf16 it reports half-ulp differences that the GPU does not have.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from ops.bench.timing import median_device_ms
from pipeline.engines.orpheus.kernels import attention, fused
from pipeline.engines.orpheus.model.decoder import Decoder
from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.tiny import ORPHEUS_3B, tiny_llama_config
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

HIDDEN = ORPHEUS_3B["hidden_size"]                   # 3072
HEADS = ORPHEUS_3B["num_attention_heads"]            # 24
KV_HEADS = ORPHEUS_3B["num_key_value_heads"]         # 8
HEAD_DIM = ORPHEUS_3B["head_dim"]                    # 128
INTERMEDIATE = ORPHEUS_3B["intermediate_size"]       # 8192
THETA = ORPHEUS_3B["rope_theta"]
EPS = 1e-5                                           # Llama's rms_norm_eps
CONTEXT = 2048
STEP_CONTEXT = 512         # the step timing's cache: 256 rows x 28 layers at 512 positions is 15 GB
STEP_POS = 200             # where its rows write; attention reads 256 positions (SDPA) or 201 (per row)
# (max abs error / max |reference|, relative L2 error). A kernel rounds where its reference rounds,
# so they differ by a rounding flip of the fp32 reductions: one bf16 ulp is 2^-8 relative.
TOLERANCE = {torch.bfloat16: (2 ** -6, 4e-3), torch.float32: (1e-5, 1e-6)}
# The decoder's logits: rounding differences (GEMM tiling of fused weights too) through 2 layers.
DECODER_TOLERANCE = {torch.bfloat16: (0.05, 2e-2), torch.float32: (1e-4, 1e-5)}


class Report:
    def __init__(self):
        self.failures: list[str] = []

    def error(self, name: str, got, want, tol) -> None:
        g, w = got.float(), want.float()
        top = w.abs().max().item() or 1.0
        max_abs = (g - w).abs().max().item()
        rel = ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
        ok = max_abs <= tol[0] * top and rel <= tol[1]
        print(f"  {name:<34} max abs {max_abs:.3e} (max |ref| {top:.2f})  rel L2 {rel:.3e}"
              f"  {'ok' if ok else 'FAIL'}", flush=True)
        if not ok:
            self.failures.append(name)

    def exit_code(self) -> int:
        """Says how the checks went: 1 if any failed, else 0."""
        if self.failures:
            print(f"FAILED: {', '.join(self.failures)}", flush=True)
            return 1
        print("all errors within tolerance", flush=True)
        return 0


def kernels_runnable(device: str) -> bool:
    """The Triton kernels can run on ``device``: CUDA, or the CPU in Triton's interpreter. If not,
    says why on stderr."""
    if fused.TRITON is None:
        print("Triton is not installed: nothing to check", file=sys.stderr)
        return False
    if not device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") != "1":
        print("off CUDA the kernels run only in Triton's interpreter: set TRITON_INTERPRET=1",
              file=sys.stderr)
        return False
    return True


def start(device: str) -> bool:
    """A check's start, once ``kernels_runnable``: names a CUDA device and torch's version, seeds
    torch. Returns whether ``device`` is CUDA."""
    on_cuda = device.startswith("cuda")
    if on_cuda:
        print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
    torch.manual_seed(0)
    return on_cuda


def timing(name: str, kernel, reference, timed: bool) -> None:
    if timed:
        k, r = median_device_ms(kernel), median_device_ms(reference)
        print(f"  {name:<34} triton {k * 1e3:8.1f} us   torch {r * 1e3:8.1f} us   x{r / k:.1f}",
              flush=True)


def rope_tables(dtype, device):
    inv = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, device=device).float() / HEAD_DIM)
    freqs = torch.arange(CONTEXT + 1, device=device).float().view(-1, 1) * inv   # [T+1, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)                              # [T+1, D]


def check_kernels(report: Report, b: int, dtype, device, timed: bool) -> None:
    tol = TOLERANCE[dtype]
    rnd = dict(dtype=dtype, device=device)
    print(f"batch {b}:", flush=True)
    x, delta = torch.randn(b, HIDDEN, **rnd), torch.randn(b, HIDDEN, **rnd)
    w = (1 + 0.1 * torch.randn(HIDDEN, device=device)).to(dtype)
    s_ref, h_ref = fused.add_rms_norm_ref(x, delta, w, EPS)
    s, h = fused.add_rms_norm_triton(x, delta, w, EPS)
    report.error(f"add_rms_norm sum B={b}", s, s_ref, tol)
    report.error(f"add_rms_norm norm B={b}", h, h_ref, tol)
    report.error(f"rms_norm (no residual) B={b}", fused.add_rms_norm_triton(x, None, w, EPS)[1],
                 fused.add_rms_norm_ref(x, None, w, EPS)[1], tol)
    timing(f"add_rms_norm B={b}", lambda: fused.add_rms_norm_triton(x, delta, w, EPS),
           lambda: fused.add_rms_norm_ref(x, delta, w, EPS), timed)

    # q, k, v as the decoder has them: column slices of the fused projection's output
    qkv = torch.randn(b, (HEADS + 2 * KV_HEADS) * HEAD_DIM, **rnd)
    q, k, v = (t.view(b, -1, HEAD_DIM) for t in
               qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1))
    cos, sin = rope_tables(dtype, device)
    rows = b + 3
    wpos = torch.randperm(CONTEXT, device=device)[:b]
    wpos[-1] = CONTEXT                                   # an idle row writes the scratch slot
    caches = [torch.zeros(rows, KV_HEADS, CONTEXT + 1, HEAD_DIM, **rnd) for _ in range(4)]
    q_ref = fused.rope_store_ref(q, k, v, cos, sin, wpos, caches[0], caches[1])
    q_out = fused.rope_store_triton(q, k, v, cos, sin, wpos, caches[2], caches[3])
    report.error(f"rope_store q B={b}", q_out, q_ref, tol)
    report.error(f"rope_store k cache B={b}", caches[2], caches[0], tol)
    report.error(f"rope_store v cache B={b}", caches[3], caches[1], TOLERANCE[torch.float32])
    timing(f"rope_store B={b}",
           lambda: fused.rope_store_triton(q, k, v, cos, sin, wpos, caches[2], caches[3]),
           lambda: fused.rope_store_ref(q, k, v, cos, sin, wpos, caches[0], caches[1]), timed)

    gate_up = 2 * torch.randn(b, 2 * INTERMEDIATE, **rnd)
    report.error(f"silu_mul B={b}", fused.silu_mul_triton(gate_up), fused.silu_mul_ref(gate_up), tol)
    timing(f"silu_mul B={b}", lambda: fused.silu_mul_triton(gate_up),
           lambda: fused.silu_mul_ref(gate_up), timed)


def random_model(layers: int, dtype, device):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(tiny_llama_config(**{**ORPHEUS_3B, "num_hidden_layers": layers}))
    return model.to(dtype).eval()


def decoders(model, rows: int, context: int, shared: bool = False):
    """(unfused torch reference, fused Triton), each with its own cache unless ``shared``."""
    cfg = model.config

    def cache():
        return KVCache(cfg.num_hidden_layers, rows, cfg.num_key_value_heads, context, HEAD_DIM,
                       model.dtype, model.device)

    plain = Decoder(model, cache(), CUSTOM_TOKEN_BASE, fuse=False, ops=fused.REFERENCE)
    fast = Decoder(model, plain.cache if shared else cache(), CUSTOM_TOKEN_BASE, ops=fused.TRITON)
    return plain, fast


def graphed(fn):
    """``fn`` captured as a CUDA graph (after a warm-up on a side stream); returns (replay, out)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph.replay, out


def check_decoder(report: Report, batches, dtype, device) -> None:
    """Prefill then decode with teacher-forced tokens, fused against unfused, on a 2-layer model."""
    tol = DECODER_TOLERANCE[dtype]
    model = random_model(2, dtype, device)
    n, prompt, steps = max(batches), 40, 4
    plain, fast = decoders(model, n + 1, 512)
    print(f"decoder, 2 layers at Orpheus-3B widths ({n} rows, {dtype}):", flush=True)
    assert fast.qkv_w[0] is not None and fast.gate_up_w[0] is not None
    ids = torch.randint(CUSTOM_TOKEN_BASE, model.config.vocab_size, (n, prompt + steps),
                        device=device)
    zero, full = torch.zeros(n, dtype=torch.long, device=device), torch.full((n,), prompt,
                                                                             device=device)
    rows = torch.arange(n, device=device)
    with torch.inference_mode():
        got = fast.prefill(ids[:, :prompt], zero, full, rows, prompt)
        want = plain.prefill(ids[:, :prompt], zero, full, rows, prompt)
        report.error("prefill logits", got, want, tol)
        for t in range(prompt, prompt + steps):
            wpos = torch.full((n,), t, device=device)
            wpos[-1] = fast.cache.scratch                                 # one idle row
            for b in batches:
                per_row = attention.available(device) and b >= attention.MIN_BATCH
                got = fast.decode(ids[:b, t], wpos[:b], 512, per_row)
                want = plain.decode(ids[:b, t], wpos[:b], 512, per_row)
                report.error(f"decode logits t={t} B={b}", got, want, tol)
        report.error("k cache after decode", fast.cache.k[:, :n], plain.cache.k[:, :n], tol)
        report.error("v cache after decode", fast.cache.v[:, :n], plain.cache.v[:, :n], tol)
        if str(device).startswith("cuda"):
            for b in batches:
                wpos = torch.full((b,), prompt + steps, device=device)
                per_row = b >= attention.MIN_BATCH
                eager = fast.decode(ids[:b, -1], wpos, 512, per_row)
                replay, out = graphed(lambda: fast.decode(ids[:b, -1], wpos, 512, per_row))
                replay()
                report.error(f"graph replay vs eager B={b}", out, eager, TOLERANCE[dtype])


def time_step(batches, dtype, device) -> None:
    """The 28-layer decode step as a CUDA graph, unfused torch against fused Triton."""
    model = random_model(ORPHEUS_3B["num_hidden_layers"], dtype, device)
    plain, fast = decoders(model, max(batches), STEP_CONTEXT, shared=True)   # timed in turn
    weights = sum(p.nbytes for p in model.model.layers.parameters()) + fast.head_w.nbytes
    print(f"decode step, 28 layers, one graph per batch ({weights / 1e9:.2f} GB of weights "
          f"read per step):", flush=True)
    with torch.inference_mode():
        for b in batches:
            tokens = torch.randint(CUSTOM_TOKEN_BASE, model.config.vocab_size, (b,), device=device)
            wpos = torch.full((b,), STEP_POS, device=device)
            per_row = b >= attention.MIN_BATCH
            cells = []
            for name, dec in (("unfused torch", plain), ("fused triton", fast)):
                replay, _ = graphed(lambda: dec.decode(tokens, wpos, 256, per_row))
                ms = median_device_ms(replay)
                cells.append(f"{name} {ms:.3f} ms ({weights / ms / 1e6:.0f} GB/s)")
                del replay
            print(f"  B={b}: " + "   ".join(cells), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--dtype", choices=("bfloat16", "float32"),
                    help="default: bfloat16 on CUDA, float32 in the interpreter")
    ap.add_argument("--no-time", action="store_true", help="errors only")
    ap.add_argument("--no-step", action="store_true", help="skip the 28-layer step timing")
    args = ap.parse_args(argv)
    if not kernels_runnable(args.device):
        return 2
    on_cuda = start(args.device)
    timed = on_cuda and not args.no_time
    report = Report()
    dtype = getattr(torch, args.dtype or ("bfloat16" if on_cuda else "float32"))
    for b in args.batches:
        check_kernels(report, b, dtype, args.device, timed)
    check_decoder(report, args.batches, dtype, args.device)
    if on_cuda and timed and not args.no_step:
        time_step(args.batches, dtype, args.device)
    return report.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
