"""Where the device's time goes while the engine runs: every kernel under the torch profiler
(CUDA activity only, CUDA-graph replays included), summed by name and by kind.

Used by ``python -m ops.bench.orpheus profile``: the fast engine on the first ``--profile-jobs``
chunks of the batch workload. The kinds are matched on kernel names (cuBLAS/CUTLASS GEMMs, our
Triton kernels, the codec's convolutions); what matches none is "other", and the table of the
largest kernels is printed whole so nothing hides in a kind.
"""

from __future__ import annotations

KINDS = (
    ("decode attention", ("_decode_kernel",)),
    ("norm, rope, silu (Triton)", ("_add_rms", "_rms", "rope", "silu", "_quant")),
    ("GEMM", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "splitk", "scaled_mm", "wgmma")),
    ("SDPA / flash (prefill, small batch)", ("flash", "fmha", "attention", "sdpa")),
    ("convolution (codec)", ("conv", "cudnn", "winograd", "implicit")),
    ("copies", ("memcpy", "memset", "copy")),
)


def kind(name: str) -> str:
    low = name.lower()
    for label, keys in KINDS:
        if any(k.lower() in low for k in keys):
            return label
    return "other"


def busy_ms(intervals: list[tuple[int, int]]) -> float:
    """Milliseconds covered by at least one of ``intervals`` (start, end ns): the device's busy
    time, where kernels on several streams overlap."""
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total / 1e6


def device_busy(prof) -> dict:
    """How much of the run the device was busy, overall and per stream: the gap between the wall
    time and the busy time is the host's, and per stream it shows what overlaps."""
    from torch.autograd import DeviceType

    by_stream: dict[int, list[tuple[int, int]]] = {}
    for e in prof.profiler.kineto_results.events():
        if e.device_type() == DeviceType.CUDA and e.duration_ns() > 0:
            by_stream.setdefault(e.device_resource_id(), []).append((e.start_ns(), e.end_ns()))
    every = [i for intervals in by_stream.values() for i in intervals]
    busiest = max(by_stream, key=lambda k: busy_ms(by_stream[k]), default=None)
    return {
        "busy_ms": round(busy_ms(every), 1),
        "busy_ms_by_stream": {
            str(k): round(busy_ms(v), 1) for k, v in sorted(by_stream.items(), key=lambda kv: -len(kv[1]))
        },
        "busiest_stream_gaps": gaps(by_stream[busiest]) if busiest is not None else {},
    }


# Where a stream's idle time lies, by the length of each gap between its kernels: the few us
# between kernels of one graph, the tens to hundreds a launch or a copy leaves, and the gaps of
# a ms and more in which the stream waits for the host (or for another stream).
GAP_BOUNDS_US = (5, 20, 100, 500, 2000)


def gaps(intervals: list[tuple[int, int]]) -> dict:
    """The idle time between a stream's kernels (start, end ns), summed by gap length: ms and
    count per bucket of ``GAP_BOUNDS_US``, the last open-ended."""
    labels = [f"<{b}us" for b in GAP_BOUNDS_US] + [f">={GAP_BOUNDS_US[-1]}us"]
    out = {label: [0.0, 0] for label in labels}
    end = None
    for start, stop in sorted(intervals):
        if end is not None and start > end:
            us = (start - end) / 1000
            label = next((f"<{b}us" for b in GAP_BOUNDS_US if us < b), labels[-1])
            out[label][0] += us / 1000
            out[label][1] += 1
        end = stop if end is None else max(end, stop)
    return {label: {"ms": round(ms, 2), "gaps": n} for label, (ms, n) in out.items()}


def profile_kernels(fn, top: int = 30) -> dict:
    """Run ``fn`` under the profiler; returns device ms by kind, the wall time, the device's busy
    time (overall and per stream), and the ``top`` kernels (name, calls, total ms)."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    wall = time.perf_counter() - t
    totals: dict[str, float] = {}
    kernels = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0.0)
        if us <= 0:
            continue
        kernels.append((e.key, e.count, us / 1000))
        totals[kind(e.key)] = totals.get(kind(e.key), 0.0) + us / 1000
    kernels.sort(key=lambda k: -k[2])
    return {
        "wall_ms": round(wall * 1000, 1),
        **device_busy(prof),
        "device_ms_by_kind": {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])},
        "top_kernels": [(name[:120], calls, round(ms, 3)) for name, calls, ms in kernels[:top]],
    }
