"""What the benchmark feeds the pipeline: corpus slices and the engine requests the renderer would make."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import text
from pipeline.corpus import parse_corpus
from pipeline.engines.base import SynthesisRequest
from pipeline.routing import all_queues, queue_for
from pipeline.settings import Settings


def read_slice(path: Path, lines: int) -> bytes:
    """The first ``lines`` lines of the corpus, as the bytes `synth submit` would read."""
    kept = path.read_bytes().splitlines(keepends=True)[:lines]
    if len(kept) < lines:
        raise click.UsageError(f"{path} has only {len(kept)} lines; asked for {lines}")
    return b"".join(kept)


def repeat_corpus(path: Path, lines: int) -> bytes:
    """A ``lines``-line corpus made of the file's non-empty lines, repeated."""
    source = [line for line in path.read_bytes().splitlines() if line.strip()]
    return b"\n".join(source[i % len(source)] for i in range(lines)) + b"\n"


def renderer_requests(settings: Settings, data: bytes, voice: str) -> list[SynthesisRequest]:
    """The requests the worker would make for this corpus: jobs grouped per queue into messages of
    ``jobs_per_task`` (pipeline/submit.py, worker/enqueue.py), queues in the worker's priority
    order, and inside a message the first chunk of every job first (pipeline/render.py:_plan)."""
    corpus = parse_corpus(data, source="bench", max_line_chars=settings.max_line_chars)
    by_queue: dict[str, list[tuple[int, list[str]]]] = {}
    for line_no, line in corpus.lines:
        queue = queue_for(line, "batch", settings.bucket_seconds)
        by_queue.setdefault(queue, []).append(
            (line_no, text.split_chunks(text.normalize(line), settings.max_chunk_chars))
        )
    requests = []
    for queue in all_queues(settings.bucket_seconds):
        jobs = by_queue.get(queue, [])
        for start in range(0, len(jobs), settings.jobs_per_task):
            group = jobs[start : start + settings.jobs_per_task]
            requests += [
                SynthesisRequest((line_no, i), chunks[i], voice)
                for i in range(max(len(c) for _, c in group))
                for line_no, chunks in group
                if i < len(chunks)
            ]
    return requests
