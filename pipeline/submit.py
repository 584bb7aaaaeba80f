"""Turn a corpus into a batch of PENDING jobs, validating everything before anything is written."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from pipeline.audio import get_format
from pipeline.corpus import Corpus, client_id_for
from pipeline.db import jobs as db
from pipeline.db.models import Batch
from pipeline.engines.registry import engine_voices
from pipeline.errors import InputError, UnknownVoiceError
from pipeline.routing import PRIORITIES, queue_for
from pipeline.settings import Settings

SAMPLE_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)


@dataclass(frozen=True)
class BatchOptions:
    voice: str | None = None
    format: str | None = None
    sample_rate: int | None = None
    priority: str = "batch"
    name: str | None = None


def resolve_options(settings: Settings, options: BatchOptions) -> BatchOptions:
    """Fill defaults and refuse unknown voices, formats, rates and priorities (InputError)."""
    voices = engine_voices(settings.engine_settings())
    voice = options.voice or settings.default_voice or (voices[0] if voices else None)
    if voice not in voices:
        raise UnknownVoiceError(
            f"unknown voice {voice!r} for engine {settings.engine!r}; choose one of {', '.join(voices)}"
        )
    fmt = options.format or settings.default_format
    get_format(fmt)
    if options.sample_rate is not None and options.sample_rate not in SAMPLE_RATES:
        raise InputError(f"unsupported sample rate {options.sample_rate}; choose one of "
                         f"{', '.join(map(str, SAMPLE_RATES))}")
    if options.priority not in PRIORITIES:
        raise InputError(f"unknown priority {options.priority!r}; choose one of {', '.join(PRIORITIES)}")
    return BatchOptions(voice=voice, format=fmt, sample_rate=options.sample_rate,
                        priority=options.priority, name=options.name)


def create_batch(session: Session, settings: Settings, corpus: Corpus, options: BatchOptions,
                 *, source: str) -> Batch:
    opts = resolve_options(settings, options)
    jobs = [
        db.NewJob(client_id=client_id_for(line_no), text=line, line_no=line_no,
                  queue=queue_for(line, opts.priority, settings.bucket_seconds))
        for line_no, line in corpus.lines
    ]
    return db.create_batch(session, name=opts.name, source=source, voice=opts.voice, format=opts.format,
                           sample_rate=opts.sample_rate, priority=opts.priority, jobs=jobs,
                           skipped_lines=len(corpus.empty_lines))
