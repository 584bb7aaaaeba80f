"""Turn a corpus into a batch of PENDING jobs, validating everything before anything is written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from pipeline import loudness
from pipeline.formats import get_format
from pipeline.corpus import Corpus, client_id_for
from pipeline.db import jobs as db
from pipeline.db.models import Batch
from pipeline.engines.registry import engine_voices
from pipeline.errors import InputError, UnknownVoiceError
from pipeline.lexicon.store import Pin
from pipeline.routing import PRIORITIES, queue_for
from pipeline.settings import Settings
from pipeline.storage import ObjectStore
from pipeline.text import normalize

SAMPLE_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)


@dataclass(frozen=True)
class BatchOptions:
    voice: str | None = None
    format: str | None = None
    sample_rate: int | None = None
    priority: str = "batch"
    name: str | None = None
    loudness: float | None = None  # LUFS every job is levelled to; None: as rendered
    true_peak: float | None = None  # dBTP ceiling of levelled jobs; None: loudness.DEFAULT_CEILING_DBTP
    lexicon: Pin | None = None  # the lexicon version every job renders with (lexicon/store.py pin)


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
        raise InputError(
            f"unsupported sample rate {options.sample_rate}; choose one of {', '.join(map(str, SAMPLE_RATES))}"
        )
    if options.priority not in PRIORITIES:
        raise InputError(f"unknown priority {options.priority!r}; choose one of {', '.join(PRIORITIES)}")
    loudness.check_target(options.loudness, options.true_peak)
    if options.true_peak is not None and options.loudness is None:
        raise InputError("a true-peak ceiling applies to levelled audio: give a loudness target with it")
    true_peak = (
        options.true_peak
        if options.true_peak is not None
        else (loudness.DEFAULT_CEILING_DBTP if options.loudness is not None else None)
    )
    return BatchOptions(
        voice=voice,
        format=fmt,
        sample_rate=options.sample_rate,
        priority=options.priority,
        name=options.name,
        loudness=options.loudness,
        true_peak=true_peak,
        lexicon=options.lexicon,
    )


def create_batch(
    session: Session, settings: Settings, corpus: Corpus, options: BatchOptions, *, source: str, **batch_columns
) -> Batch:
    """``batch_columns``: what the API adds (owner_key_id, webhook_url, expires_at ...)."""
    opts = resolve_options(settings, options)
    jobs = [
        db.NewJob(
            client_id=client_id_for(line_no),
            text=line,
            line_no=line_no,
            queue=queue_for(line, opts.priority, settings.bucket_seconds),
        )
        for line_no, line in corpus.lines
    ]
    return db.create_batch(
        session,
        name=opts.name,
        source=source,
        voice=opts.voice,
        format=opts.format,
        sample_rate=opts.sample_rate,
        priority=opts.priority,
        jobs=jobs,
        skipped_lines=len(corpus.empty_lines),
        loudness_target=opts.loudness,
        true_peak_max=opts.true_peak,
        lexicon=opts.lexicon,
        **batch_columns,
    )


def withdraw_batch(sessions: sessionmaker[Session], store: ObjectStore, batch_id: str) -> None:
    """Remove a batch whose messages could not all be sent, everywhere. Its rows go first: a worker
    already rendering one of its jobs then cannot record it and removes the object it wrote
    (pipeline/render.py), and later messages find nothing to claim. Its objects go next."""
    with sessions() as session:
        batch = session.get(Batch, batch_id)
        if batch is not None:
            session.delete(batch)
        session.commit()
    for key in store.list(f"batches/{batch_id}/"):
        store.delete(key)


@dataclass(frozen=True)
class Item:
    """One job given by a client: its text, an optional id of its own and optional overrides."""

    text: str
    client_id: str | None = None
    voice: str | None = None
    format: str | None = None
    sample_rate: int | None = None


def item_client_id(index: int) -> str:
    return f"item-{index + 1:06d}"


def create_item_batch(
    session: Session, settings: Settings, items: Sequence[Item], options: BatchOptions, *, source: str, **batch_columns
) -> Batch:
    """A batch from explicit items (the API). Everything is validated before anything is written:
    InputError names the first bad item."""
    return db.insert_batch(session, plan_item_batch(settings, items, options, source=source, **batch_columns))


def plan_item_batch(
    settings: Settings,
    items: Sequence[Item],
    options: BatchOptions,
    *,
    source: str,
    queued: bool = False,
    **batch_columns,
) -> db.PlannedBatch:
    """``create_item_batch``'s rows, validated, without the database (``db.plan_batch``)."""
    opts = resolve_options(settings, options)
    assert opts.voice is not None and opts.format is not None  # resolve_options fills them
    seen: set[str] = set()
    jobs = []
    for index, item in enumerate(items):
        where = f"item {index}" + (f" ({item.client_id!r})" if item.client_id else "")
        text = _check_text(item.text, settings.max_line_chars, where)
        client_id = item.client_id if item.client_id is not None else item_client_id(index)
        if client_id in seen:
            raise InputError(f"{where}: client_id {client_id!r} is used twice in this batch")
        seen.add(client_id)
        own = _item_options(settings, opts, item)
        jobs.append(
            db.NewJob(
                client_id=client_id,
                text=text,
                line_no=index + 1,
                queue=queue_for(text, opts.priority, settings.bucket_seconds),
                voice=own.voice,
                format=own.format,
                sample_rate=own.sample_rate,
            )
        )
    return db.plan_batch(
        name=opts.name,
        source=source,
        voice=opts.voice,
        format=opts.format,
        sample_rate=opts.sample_rate,
        priority=opts.priority,
        jobs=jobs,
        queued=queued,
        loudness_target=opts.loudness,
        true_peak_max=opts.true_peak,
        lexicon=opts.lexicon,
        **batch_columns,
    )


def _check_text(raw: str, max_chars: int, where: str) -> str:
    if len(raw) > max_chars:
        raise InputError(f"{where}: text has {len(raw):,} characters; the limit is {max_chars:,}")
    if "\x00" in raw:
        raise InputError(f"{where}: text contains a NUL character")
    if not normalize(raw):
        raise InputError(f"{where}: text is empty")
    return raw.strip()


def _item_options(settings: Settings, batch: BatchOptions, item: Item) -> BatchOptions:
    if item.voice is None and item.format is None and item.sample_rate is None:
        return batch
    return resolve_options(
        settings,
        BatchOptions(
            voice=item.voice or batch.voice,
            format=item.format or batch.format,
            sample_rate=item.sample_rate if item.sample_rate is not None else batch.sample_rate,
            priority=batch.priority,
            loudness=batch.loudness,
            true_peak=batch.true_peak,
            lexicon=batch.lexicon,
        ),
    )
