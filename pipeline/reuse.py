"""Render reuse: a job whose content identity was rendered before, in the same scope, copies that
audio instead of rendering it again.

The identity is what decides the audio: the engine, its model and quantization, the voice, the
text after the front end (the chunks the engine is given, their rates, and the pauses between),
the format settings (format, sample rate, loudness target and ceiling, crossfade) and the seed.
The scope is the job's API key by default (SYNTH_REUSE=key): a cache shared across keys would let
one tenant learn, from a job that costs nothing and finishes at once, that another had rendered
the same text. An operator serving one organisation can widen it (shared), or turn reuse off.
Batches submitted from the command line, which have no key, share the scope "".

A reused job's audio is a copy under its own key, so deleting the batch that rendered it first
takes nothing from it; the ``renders`` row goes with the job that rendered it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.db.models import Batch, Job, Render

REUSE_MODES = ("key", "shared", "off")
SHARED_SCOPE = "*"
# Metrics a reused job takes from the render it copies: they describe the audio, not the work.
AUDIO_METRICS = ("audio_s", "loudness_lufs", "true_peak_dbtp", "verdict", "engine", "model", "quantization",
                 "device_type")


def identity(info, job: Job, chunks: Sequence, pauses: Sequence[float] | None, *, crossfade_ms: int,
             seed: int | None = None) -> str:
    """sha256 of everything that decides a job's audio (``chunks``: the front end's Speech)."""
    parts = {
        "engine": info.name, "model": info.model, "quantization": info.quantization, "voice": job.voice,
        "chunks": [[c.text, c.rate] for c in chunks], "pauses": list(pauses or ()),
        "format": job.format, "sample_rate": job.sample_rate, "loudness": job.loudness_target,
        "true_peak": job.true_peak_max, "crossfade_ms": crossfade_ms, "seed": seed,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def scopes(session: Session, jobs: Sequence[Job], mode: str) -> dict[str, str]:
    """Each job's scope by job id; empty when reuse is off."""
    if mode == "off" or not jobs:
        return {}
    if mode == "shared":
        return {j.id: SHARED_SCOPE for j in jobs}
    owners = dict(session.execute(select(Batch.id, Batch.owner_key_id)
                                  .where(Batch.id.in_({j.batch_id for j in jobs}))).all())
    return {j.id: owners.get(j.batch_id) or "" for j in jobs}


def find(session: Session, scope: str, ident: str) -> Render | None:
    return session.get(Render, (scope, ident))


def remember(session: Session, scope: str, ident: str, *, job_id: str, object_key: str, metrics: dict) -> None:
    """Record a rendered job's identity; commits. Two jobs of one identity rendered at once both
    record theirs: the second finds the row taken and keeps the first, which is as good."""
    kept = {k: metrics.get(k) for k in (*AUDIO_METRICS, "synth_s")}
    verify = (metrics.get("extra") or {}).get("verify")
    if verify:
        kept["verify"] = verify
    try:
        session.add(Render(scope=scope, identity=ident, job_id=job_id, object_key=object_key, metrics=kept))
        session.commit()
    except IntegrityError:
        session.rollback()


def reused_metrics(render: Render, **work) -> dict:
    """A reused job's metrics: the copied audio's own, no engine time, and the time saved."""
    source = render.metrics or {}
    metrics = {k: source.get(k) for k in AUDIO_METRICS}
    metrics.update(work, synth_s=0.0, rtf=0.0, reused_s=source.get("synth_s") or 0.0,
                   extra={"reused": {"job": render.job_id},
                          **({"verify": source["verify"]} if source.get("verify") else {})})
    return metrics
