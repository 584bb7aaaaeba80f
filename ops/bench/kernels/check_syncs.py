"""Does the runner's launch wait for the device? Each kind of step (decode only, a realtime prompt
through the prefill graphs, batch prompts through the eager prefill, a chunked prompt, row moves) is
launched behind a long ``torch.cuda._sleep`` already queued on the stream. A launch that queues its
work without waiting returns while the device still sleeps; one that waits returns after it. Then
30 more steps of every kind run under ``torch.cuda.set_sync_debug_mode("error")``, which raises
at the first synchronizing call: the traceback names the line.

    python -m ops.bench.kernels.check_syncs [--kv-dtype fp8] [--layers 28] [--profile]   # CUDA

Prints per step kind: the host ms of the launch, by part (runner.HostTimes), whether the device was
still asleep when it returned, and the first synchronizing call if any. Exits 1 if a launch waited.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

import torch

SLEEP_MS = 60.0


def sleep_cycles(ms: float) -> int:
    """Cycles of ``torch.cuda._sleep`` for about ``ms`` on this device (measured once)."""
    n = 10_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(n)
    start.record()
    torch.cuda._sleep(n)
    end.record()
    torch.cuda.synchronize()
    return int(n * ms / start.elapsed_time(end))


def report_host(prof, top: int = 15) -> None:
    """The host's largest self times over the launches: torch ops and CUDA runtime calls (a
    ``cudaStreamSynchronize`` or ``cudaMemcpy`` there is a wait; an op far above its launch cost is
    host work, as cuDNN's planning of each new shape was)."""
    print(f"host self time over the launches, top {top} (ms, calls):")
    for e in sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:top]:
        print(f"  {e.self_cpu_time_total / 1000:9.2f} {e.count:6d}  {e.key}")


def plan_kind(plan) -> str:
    parts = []
    if plan.moves:
        parts.append(f"{len(plan.moves)} moves")
    if plan.prefill:
        whole = all(c.start == 0 and c.last for c in plan.prefill)
        tokens = sum(c.end - c.start for c in plan.prefill)
        parts.append(f"prefill {len(plan.prefill)}x ({tokens} tok, {'whole' if whole else 'chunked'})")
    if plan.decode:
        parts.append(f"decode {len(plan.decode)} rows" + (" (realtime only)" if plan.realtime_only else ""))
    return ", ".join(parts) or "empty"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kv-dtype", default="model", choices=("model", "fp8"),
                    help="the KV cache's dtype: the model's, or fp8")
    ap.add_argument("--layers", type=int, default=28, help="decoder layers of the random 3B model")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--profile", action="store_true",
                    help="the host's time by op over the launches (the profiler slows them)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 2
    from ops.bench.orpheus.models import load_model
    from pipeline.engines.orpheus.model.sampling import SamplingParams
    from pipeline.engines.orpheus.serving.runner import HostTimes, ModelRunner
    from pipeline.engines.orpheus.serving.scheduler import Scheduler, SchedulerConfig, Seq
    from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

    lm = load_model("random-3b", "auto", "auto", "none")
    model = lm.model
    if args.layers < len(model.model.layers):
        model.model.layers = model.model.layers[: args.layers]
        model.config.num_hidden_layers = args.layers
    runner = ModelRunner(model, 64, 2048, SamplingParams(ignore_eos=True),
                         logits_lo=CUSTOM_TOKEN_BASE, kv_dtype=args.kv_dtype)
    print(f"{torch.cuda.get_device_name()}, {args.layers} layers, KV {runner.cache.k[0].dtype}, "
          f"fused sampler {runner.sampler.fused is not None}", flush=True)
    sched = Scheduler(64, 2048, config=SchedulerConfig(reserved=8, prefill_tokens=1024, admit_every=1))
    gen = torch.Generator().manual_seed(0)

    def prompt(n):
        return torch.randint(1000, 20000, (n,), generator=gen).tolist()

    arrivals = {0: [(True, 40), (True, 90)], 3: [(False, 300)] * 6, 8: [(False, 1500)],
                14: [(True, 60)], 20: [(False, 200)] * 3}
    cycles = sleep_cycles(SLEEP_MS)
    waited = False
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                              torch.profiler.ProfilerActivity.CUDA]) \
        if args.profile else None
    if prof is not None:
        prof.start()
    for step in range(args.steps):
        for realtime, n in arrivals.get(step, []):
            sched.add(Seq(key=(step, n, realtime, len(sched.by_row)), prompt=prompt(n),
                          budget=30 if step < 10 else 400, realtime=realtime, seed=step))
        plan = sched.schedule()
        if plan.empty:
            continue
        kind = plan_kind(plan)
        runner.host = HostTimes()
        with torch.cuda.stream(runner.stream or torch.cuda.current_stream()):
            torch.cuda._sleep(cycles)        # on the stream the runner launches on
        t0 = time.perf_counter()
        launched = runner.launch(plan)
        ms = (time.perf_counter() - t0) * 1000
        asleep = not launched.done.query()
        waited |= not asleep
        h = runner.host
        print(f"step {step:2d} {kind}: launch {ms:6.2f} ms (moves {h.moves * 1e3:.2f}, prefill "
              f"{h.prefill * 1e3:.2f} of it begin {h.begin * 1e3:.2f}, decode {h.decode * 1e3:.2f}, "
              f"copies {h.copies * 1e3:.2f}); device {'still asleep' if asleep else 'DONE: it waited'}",
              flush=True)
        sched.postprocess(plan, runner.collect(launched))
    if prof is not None:
        prof.stop()
        report_host(prof)
    # The sync debugger over more steps of every kind: the first synchronizing call of each.
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    reported = set()
    for step in range(args.steps, args.steps + 30):
        for realtime, n in {args.steps: [(True, 50), (False, 400), (False, 400)],
                            args.steps + 5: [(False, 1300)]}.get(step, []):
            sched.add(Seq(key=("dbg", step, n, realtime), prompt=prompt(n), budget=100,
                          realtime=realtime, seed=step))
        plan = sched.schedule()
        if plan.empty:
            continue
        kind = plan_kind(plan)
        try:
            launched = runner.launch(plan)
        except RuntimeError as e:
            if "synchroniz" not in str(e):
                raise
            frames = [f for f in traceback.extract_tb(e.__traceback__) if "pipeline" in f.filename]
            where = " <- ".join(f"{f.filename.split('pipeline/')[-1]}:{f.lineno} {f.line}"
                                for f in reversed(frames[-3:]))
            if kind not in reported:
                print(f"SYNC in {kind}: {where}", flush=True)
                reported.add(kind)
            # Launch it again unwatched (a prefill or a move rewrites the same values) and go on.
            torch.cuda.set_sync_debug_mode(0)
            launched = runner.launch(plan)
        torch.cuda.set_sync_debug_mode(0)
        sched.postprocess(plan, runner.collect(launched))
        torch.cuda.set_sync_debug_mode("error")
    torch.cuda.set_sync_debug_mode(0)
    if not reported:
        print("no synchronizing call in any launch under the sync debugger")
    return 1 if waited or reported else 0


if __name__ == "__main__":
    sys.exit(main())
