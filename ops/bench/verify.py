"""What checking audio against its text costs, per CPU core: seconds of audio checked per second of
one core's CPU time, beside what Piper spends rendering the same audio, and the loudness meter's
cost. The lines are the first --lines of the benchmark corpus, rendered by Piper once up front.

    python -m ops.bench.verify --lines 40
    python -m ops.bench.verify --lines 40 --json .bench/verify.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ops.bench import SHARED_CORPUS, git_commit
from pipeline import audio, loudness, textfront
from pipeline.engines.base import SynthesisRequest
from pipeline.engines.registry import load_engine
from pipeline.hostinfo import cpu_name
from pipeline.settings import Settings
from pipeline.verify import verdict
from pipeline.verify.recognizer import load_recognizer


def render(engine, text: str) -> np.ndarray:
    info = engine.info
    chunks, pauses = textfront.prepare(text, info.profile(info.voices[0])).pieces(400)
    pieces: list[list[np.ndarray]] = [[] for _ in chunks]
    requests = [SynthesisRequest(("b", i), c.text, info.voices[0]) for i, c in enumerate(chunks)]
    for chunk in engine.synthesize(requests):
        pieces[chunk.key[1]].append(chunk.audio)
    return audio.join(
        [np.concatenate(p) if p else np.zeros(0, np.float32) for p in pieces], info.sample_rate, 30, pauses
    )


def cpu_seconds(fn) -> tuple[float, object]:
    started = time.process_time()
    out = fn()
    return time.process_time() - started, out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m ops.bench.verify", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--corpus", type=Path, default=SHARED_CORPUS)
    ap.add_argument("--lines", type=int, default=40)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)

    settings = Settings(engine_threads=1)  # one core: figures per core
    texts = [line.strip() for line in args.corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = texts[: args.lines]
    engine = load_engine(settings.engine_settings())
    engine.warmup()
    recognizer = load_recognizer(settings.verify_recognizer)
    info = engine.info
    voice = info.profile(info.voices[0])
    render_cpu, clips = cpu_seconds(lambda: [render(engine, t) for t in texts])
    audio_s = sum(c.size for c in clips) / info.sample_rate
    verdict.check(clips[0], info.sample_rate, texts[0], voice, recognizer)  # the recognizer's load
    check_cpu, results = cpu_seconds(
        lambda: [verdict.check(c, info.sample_rate, t, voice, recognizer) for c, t in zip(clips, texts)]
    )
    meter_cpu, _ = cpu_seconds(lambda: [loudness.measure(c, info.sample_rate) for c in clips])
    engine.close()
    statuses = [r.status for r in results]
    out = {
        "date": datetime.now(UTC).date().isoformat(),
        "commit": git_commit(),
        "cpu": cpu_name(),
        "python": platform.python_version(),
        "recognizer": recognizer.name,
        "lines": len(texts),
        "audio_s": round(audio_s, 1),
        "check_audio_s_per_cpu_s": round(audio_s / check_cpu, 2),
        "render_audio_s_per_cpu_s": round(audio_s / render_cpu, 2),
        "loudness_meter_ms_per_job": round(1000 * meter_cpu / len(clips), 2),
        "verdicts": {s: statuses.count(s) for s in sorted(set(statuses))},
        "flagged": [
            {"line": i + 1, "verdict": r.status, "reasons": r.reasons, "text": texts[i][:80]}
            for i, r in enumerate(results)
            if r.status in ("suspect", "bad")
        ],
    }
    print(f"{out['lines']} lines, {out['audio_s']} s of audio on {out['cpu']} (commit {out['commit']})")
    print(f"check ({out['recognizer']}): {out['check_audio_s_per_cpu_s']} s of audio per CPU second")
    print(f"render (piper, for scale): {out['render_audio_s_per_cpu_s']} s of audio per CPU second")
    print(f"loudness meter: {out['loudness_meter_ms_per_job']} ms of CPU per job")
    print(f"verdicts: {out['verdicts']}")
    for flagged in out["flagged"]:
        print(f"  line {flagged['line']} {flagged['verdict']}: {'; '.join(flagged['reasons'])}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
