"""A model of W2 on a virtual clock: the real scheduler and chunk grid, the device's step times.

W2 on the GPU takes a device call; its outcome (first audio, underruns, batch throughput) is set
mostly by which steps the scheduler runs and what each costs. This replays the same workload as
``bench_orpheus.py`` (the W1 background, then realtime streams arriving over ``--spread`` s)
through the real ``Scheduler`` and ``StreamState`` with no threads and no model: each plan is
charged a device time from a cost model fitted to the H200's figures, the loop's overlap is kept
(step N+1 is planned while N runs, N's tokens are seen when it ends), and each chunk leaves a fixed
codec latency after its last frame. It prints the same figures as the benchmark's W2, so
scheduling policies can be compared on the CPU before a device call tests the best ones. It
predicts; only device runs measure.

The cost model (ms; H200, bf16 weights, fp8 cache; ops/results sessions 6-7):

- decode step over ``b`` graph rows: ``2.45 + 0.0123 b`` (micro.py: 2.47 at 1 row, 4.02 at 128),
  plus ``--contention`` ms (the codec's kernels beside it: 5.26 ms a realtime-only step at 128
  rows in W2, against 4.02 alone);
- a prefill of ``t`` tokens: ``1.0 + 0.0095 t`` (weight-bound for short prompts, then about 105
  tokens a ms).

``--lane 1`` models a step that is not built: starting-only steps (``--steady``) at the graph
batch of the starting streams alone (a gathered step) rather than the realtime tier's. Session 8
ran it before building it: at 128 streams it took about 12 ms off the median first chunk, while a
step's fixed cost (weights and the codec beside it) stayed, and the playing streams ran dry as
with ``--steady`` alone; so the codec was sped up instead (ops/results, session 8).

Calibrated on session 7 (H200): ``--prefill-base-ms 3 --contention-ms 1.4 --codec-ms 19``
reproduced W2's median phases (decode 129 against 133 ms, steps of 5.26 / 5.79 ms); its tails are
narrower than the device's by 40-50 ms at p99 (no host, GIL or clock noise here).

Run: python -m ops.orpheus_bench.w2_model [--steady 1,2] [--lane 0,1] [--codec-ms 20,7]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import text as texts
from pipeline.constants import SNAC_TOKENS_PER_FRAME
from pipeline.engines.orpheus.engine import text_chars_for, token_budget
from pipeline.engines.orpheus.scheduler import Scheduler, Seq
from pipeline.engines.orpheus.streaming import StreamState

ROOT = Path(__file__).resolve().parents[2]
CORPUS = next((p for p in (ROOT / "shared", ROOT.parent / "shared")
               if (p / "corpus" / "bench.txt").exists()), ROOT / "shared") / "corpus" / "bench.txt"
FRAME_S = 2048 / 24000
PROMPT_EXTRA = 12           # "tara: ", BOS and the control tokens (byte-level tokenizer)


@dataclass
class Costs:
    base_ms: float = 2.45
    per_row_ms: float = 0.0123
    contention_ms: float = 1.2
    prefill_base_ms: float = 1.0
    prefill_per_token_ms: float = 0.0095
    codec_ms: float = 20.0
    ladder: tuple = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256, 320,
                     384, 448, 512)

    def padded(self, b: int) -> int:
        return next(x for x in self.ladder if x >= b)

    def step_ms(self, plan, lane: bool) -> float:
        ms = 0.0
        if plan.prefill:
            ms += self.prefill_base_ms + self.prefill_per_token_ms * sum(
                c.end - c.start for c in plan.prefill)
        if plan.decode:
            b = len(plan.decode) if lane and plan.starting_only else plan.rows
            ms += self.base_ms + self.per_row_ms * self.padded(b) + self.contention_ms
        return ms


@dataclass
class Track:
    seq: Seq
    submitted: float
    times: list[float] = field(default_factory=list)    # when each generated token was seen
    admitted: float | None = None                       # its prefill's step started


def workload(lines_w1: int = 150, streams: int = 128, context: int = 2048, corpus: Path = CORPUS):
    """The bench's W2: the W1 background's chunks and the streams' texts, from ``corpus``."""
    if not corpus.exists():
        raise SystemExit(f"no corpus at {corpus}: copy shared/corpus/bench.txt there or pass "
                         "--corpus")
    lines = [ln.strip() for ln in corpus.read_text().splitlines() if ln.strip()]
    chars = text_chars_for(context)

    def chunks(picked):
        return [c for line in picked for c in texts.split_chunks(texts.normalize(line), chars)]

    background = chunks(lines[:: max(1, len(lines) // 500)][:lines_w1])
    rt = chunks(lines[1::3])[:streams]
    return background, rt


def make_seq(key, text: str, realtime: bool) -> Seq:
    prompt = [0] * (len(text.encode()) + PROMPT_EXTRA)
    return Seq(key, prompt, token_budget(text, 1.0, 28, 2000), realtime=realtime)


def run(costs: Costs, steady: int = 1, lane: bool = False, every: int = 2, starting_every: int = 8,
        first_lookahead: int = 2, streams: int = 128, spread: float = 2.0, lead: float = 3.0,
        rows: int = 512, realtime_prefill_tokens: int = 0, fast_tokens: int = 0,
        corpus: Path = CORPUS) -> dict:
    background, rt = workload(streams=streams, corpus=corpus)
    first_tokens = StreamState(0, ramp=True, first_right=first_lookahead).first_ready_frames * 7
    sched = Scheduler(rows, 2048, reserved=rows // 8, batch_floor=rows // 8, admit_every=8,
                      realtime_max_rows=128, full_every=every, full_every_starting=starting_every,
                      first_tokens=fast_tokens or first_tokens, steady_every=steady,
                      pause_batch=True)
    if realtime_prefill_tokens:
        sched.realtime_prefill_tokens = realtime_prefill_tokens
    tracks: dict[int, Track] = {}
    for i, text in enumerate(background):
        s = make_seq(f"b{i}", text, False)
        sched.add(s)
        tracks[id(s)] = Track(s, 0.0)
    arrivals = [(lead + spread * i / max(1, streams), make_seq(f"r{i}", t, True))
                for i, t in enumerate(rt)]
    pending = None          # (plan, end time, start time) launched, not yet collected
    steps: dict[str, int] = {}
    step_s: dict[str, float] = {}
    now = 0.0               # the device's clock: when the work queued so far ends
    a = 0
    rt_done = 0
    batch_tokens_in_window, window = 0, [lead, None]
    while rt_done < len(arrivals) and not (sched.idle and a >= len(arrivals) and pending is None):
        plan_at = now if pending is None else pending[2]     # planned while the last one runs
        while a < len(arrivals) and arrivals[a][0] <= plan_at:
            t, s = arrivals[a]
            sched.add(s)
            tracks[id(s)] = Track(s, t)
            a += 1
        if sched.idle and pending is None:
            now = max(now, arrivals[a][0])
            continue
        plan = sched.schedule()
        launched = None
        if not plan.empty:
            start = max(now, plan_at)
            took = costs.step_ms(plan, lane) / 1000
            now = start + took
            launched = (plan, now, start)
            if start >= lead:
                kind = "starting" if plan.starting_only else "realtime" if plan.realtime_only \
                    else "full"
                steps[kind] = steps.get(kind, 0) + 1
                step_s[kind] = step_s.get(kind, 0.0) + took
                if plan.prefill:
                    steps["prefill"] = steps.get("prefill", 0) + 1
            for c in plan.prefill:
                tr = tracks[id(c.seq)]
                tr.admitted = start if tr.admitted is None else tr.admitted
        previous, pending = pending, launched
        if previous is not None:
            p_plan, end, _ = previous
            toks = {row: [1] for row in p_plan.owners}     # one token a row, a step
            before = {row: seq.generated for row, (seq, _) in p_plan.owners.items()}
            finished = sched.postprocess(p_plan, toks)
            for row, (seq, _) in p_plan.owners.items():
                tr = tracks[id(seq)]
                new = seq.generated - before[row]
                tr.times += [end] * new
                if not seq.realtime and window[1] is None and end >= window[0]:
                    batch_tokens_in_window += new
            rt_done += sum(s.realtime for s in finished)
        elif launched is None:
            now = max(now, arrivals[a][0]) if a < len(arrivals) else now + 0.001
    window[1] = now
    out = summarize([tracks[id(s)] for _t, s in arrivals], costs, first_lookahead,
                    batch_tokens_in_window / max(1e-9, window[1] - window[0]))
    out["steps"] = steps
    out["step_ms"] = {k: round(1000 * v / steps[k], 2) for k, v in step_s.items()}
    return out


def chunk_times(track: Track, costs: Costs, first_lookahead: int) -> list[tuple[float, float]]:
    """(when the chunk is in the listener's hands, its audio seconds) for one stream."""
    st = StreamState(0, ramp=True, first_right=first_lookahead)
    frames = len(track.times) // SNAC_TOKENS_PER_FRAME
    out = []
    for f in range(1, frames + 1):
        st.assembler.frames.append(None)
        ready = track.times[f * SNAC_TOKENS_PER_FRAME - 1]
        for a, b, _ws, _we in st.ready_chunks(finished=f == frames):
            out.append((ready + costs.codec_ms / 1000, (b - a) * FRAME_S))
            st.emitted = b
    return out


def summarize(tracks: list[Track], costs: Costs, first_lookahead: int, batch_tok_s: float) -> dict:
    ttfb, rtf, underruns, phases = [], [], 0, []
    first = StreamState(0, ramp=True, first_right=first_lookahead).first_ready_frames * 7
    for tr in tracks:
        chunks = chunk_times(tr, costs, first_lookahead)
        if not chunks:
            continue
        ttfb.append(chunks[0][0] - tr.submitted)
        phases.append((tr.admitted - tr.submitted, tr.times[0] - tr.admitted,
                       tr.times[first - 1] - tr.times[0]))
        played = chunks[0][0]
        for t, secs in chunks:
            if t > played + 1e-3:
                underruns += 1
                played = t
            played += secs
        rtf.append((chunks[-1][0] - tr.submitted) / sum(s for _t, s in chunks))
    q = statistics.quantiles(ttfb, n=100)
    return {"streams": len(ttfb), "ttfb_p50": 1000 * statistics.median(ttfb), "ttfb_p95": 1000 * q[94],
            "ttfb_p99": 1000 * q[98], "rtf_max": max(rtf), "rtf_lt_0_8": sum(r < 0.8 for r in rtf),
            "underruns": underruns, "batch_x_real_time": batch_tok_s / 82.03,
            "phases_ms": {k: round(1000 * statistics.median(p[i] for p in phases), 1)
                          for i, k in enumerate(("queued", "prefill", "decode"))}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steady", default="1,2")
    ap.add_argument("--lane", default="0,1")
    ap.add_argument("--codec-ms", default="20,7")
    ap.add_argument("--lookahead", default="2,1")
    ap.add_argument("--starting-every", default="8")
    ap.add_argument("--every", default="2")
    ap.add_argument("--contention-ms", type=float, default=1.2)
    ap.add_argument("--prefill-base-ms", type=float, default=1.0)
    ap.add_argument("--realtime-prefill-tokens", default="0")
    ap.add_argument("--fast-tokens", default="0")
    ap.add_argument("--streams", type=int, default=128)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    args = ap.parse_args(argv)
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    print(f"{'steady':>6} {'lane':>4} {'codec':>5} {'look':>4} {'st.ev':>5} {'ev':>3} {'rtpf':>5} "
          f"{'fast':>4} | {'p50':>5} {'p95':>5} {'p99':>5} {'rtf max':>7} {'<0.8':>5} "
          f"{'under':>5} {'batch x':>7}")
    for steady, lane, codec, look, sev, ev, rtpf, fast in itertools.product(
            ints(args.steady), ints(args.lane), map(float, args.codec_ms.split(",")),
            ints(args.lookahead), ints(args.starting_every), ints(args.every),
            ints(args.realtime_prefill_tokens), ints(args.fast_tokens)):
        if steady == 1 and lane:
            continue
        costs = Costs(codec_ms=codec, contention_ms=args.contention_ms,
                      prefill_base_ms=args.prefill_base_ms)
        r = run(costs, steady, bool(lane), ev, sev, look, args.streams,
                realtime_prefill_tokens=rtpf, fast_tokens=fast, corpus=args.corpus)
        print(f"{steady:>6} {lane:>4} {codec:>5.0f} {look:>4} {sev:>5} {ev:>3} {rtpf:>5} {fast:>4} | "
              f"{r['ttfb_p50']:>5.0f} {r['ttfb_p95']:>5.0f} {r['ttfb_p99']:>5.0f} "
              f"{r['rtf_max']:>7.2f} {r['rtf_lt_0_8']:>5} {r['underruns']:>5} "
              f"{r['batch_x_real_time']:>7.0f}", flush=True)
        if args.verbose:
            print("      ", r["phases_ms"], r["steps"], r["step_ms"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
