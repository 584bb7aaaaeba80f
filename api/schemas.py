"""Request and response bodies of the HTTP API (tables live in pipeline/db/)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from pipeline.loudness import CEILING_RANGE, LOUDNESS_RANGE

Priority = Literal["batch", "realtime"]
WebhookEvent = Literal["job.finished", "job.failed", "batch.finished", "document.finished"]

# Events without an address could never be sent: a client that sends them has lost its URL on the
# way, and is told so (422) rather than waiting for webhooks that never come.
EVENTS_WITHOUT_URL = "webhook_events needs webhook_url: without an address no event is sent"


# Schemes are case-insensitive; no control or space character of any kind, listed rather than
# written \s, whose meaning differs between regex engines (pydantic's Rust one, JSON Schema's).
URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$"
CLIENT_ID_PATTERN = r"^[^\x00-\x1f]+$"
# What a client must fix when a field misses its pattern: pydantic's own message only repeats the
# regular expression, which tells a developer nothing (the 422 keeps it in ctx.pattern).
PATTERN_HINTS = {
    URL_PATTERN: "must be an http:// or https:// URL without spaces or control characters",
    CLIENT_ID_PATTERN: "must not contain control characters (tab, newline, NUL ...)",
}


def _whole(value):
    """JSON Schema's integer includes 24000.0: read it as 24000 (strict mode refuses any float)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


SampleRate = Annotated[int | None, BeforeValidator(_whole)]


class _NoNul(BaseModel):
    """SQL text cannot hold NUL characters (PostgreSQL refuses them): say so instead of failing.
    (Lone surrogates pydantic refuses itself; NaN and infinity are refused here, as JSON has none.)

    Strict: a value is of the type the OpenAPI document gives, as JSON writes it. Pydantic's lax
    mode reads "24000" as an integer and true or "1" as a number; a client that sends those has a
    bug the document already tells it about, and is told again (422) rather than served a guess."""

    model_config = ConfigDict(allow_inf_nan=False, strict=True)

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value):
        if isinstance(value, str) and "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value


class _In(_NoNul):
    model_config = ConfigDict(extra="forbid")


class Webhook(_In):
    webhook_url: str | None = Field(
        None, max_length=2000, pattern=URL_PATTERN, description="POSTed (signed) on the events below"
    )
    webhook_events: list[WebhookEvent] | None = Field(
        None, min_length=1, max_length=4, description="Default: all of them; needs webhook_url"
    )

    @model_validator(mode="after")
    def _events_need_a_url(self):
        if self.webhook_events is not None and self.webhook_url is None:
            raise ValueError(EVENTS_WITHOUT_URL)
        return self

    def fingerprinted(self) -> bytes:
        """The body as an Idempotency-Key's fingerprint reads it."""
        unset_later = {name for name in ADDED_LATER if self.__dict__.get(name, ...) is None}
        return self.model_dump_json(exclude=unset_later).encode()


class Levelled(_In):
    loudness_target: float | None = Field(
        None,
        ge=LOUDNESS_RANGE[0],
        le=LOUDNESS_RANGE[1],
        description="LUFS (EBU R128 integrated) every job is levelled to, e.g. -16; default: as rendered",
    )
    true_peak_max: float | None = Field(
        None,
        ge=CEILING_RANGE[0],
        le=CEILING_RANGE[1],
        description="dBTP ceiling of levelled jobs; needs loudness_target; default -1 (lossy formats keep 1 dB more)",
    )


MAX_VERSION = 2**31 - 1  # a lexicon version is an SQL integer


class Lexiconed(_In):
    lexicon: str | None = Field(
        None,
        min_length=1,
        max_length=100,
        description=(
            "A lexicon of yours (name or id) every job reads its words with; default: your lexicon named "
            "`default`, if you have one"
        ),
    )
    lexicon_version: Annotated[int | None, BeforeValidator(_whole)] = Field(
        None, ge=1, le=MAX_VERSION, description="Pin this version; default: the latest"
    )


class ItemIn(_In):
    client_id: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        pattern=CLIENT_ID_PATTERN,
        description="Your id for this item, unique in the batch; default item-NNNNNN",
    )
    text: str = Field(min_length=1)
    voice: str | None = Field(None, min_length=1, max_length=64)
    format: str | None = Field(None, min_length=1, max_length=8)
    sample_rate: SampleRate = None


# Fields added after bodies were first fingerprinted: left out while unset, so a retry of a body
# that never had them still matches its first request's Idempotency-Key fingerprint.
ADDED_LATER = ("loudness_target", "true_peak_max", "lexicon", "lexicon_version")


class BatchCreate(Levelled, Lexiconed, Webhook):
    name: str | None = Field(None, max_length=200)
    items: list[ItemIn] = Field(min_length=1)
    voice: str | None = Field(None, min_length=1, max_length=64, description="Default for items without one")
    format: str | None = Field(None, min_length=1, max_length=8)
    sample_rate: SampleRate = None
    priority: Priority = "batch"


class JobCreate(Levelled, Lexiconed, Webhook):
    text: str = Field(min_length=1)
    client_id: str | None = Field(None, min_length=1, max_length=200, pattern=CLIENT_ID_PATTERN)
    voice: str | None = Field(None, min_length=1, max_length=64)
    format: str | None = Field(None, min_length=1, max_length=8)
    sample_rate: SampleRate = None
    priority: Priority = "batch"


class SpeechCreate(_NoNul):
    """OpenAI's POST /v1/audio/speech body."""

    model: str = Field(min_length=1, max_length=200, description="Accepted and recorded nowhere: synth has one engine")
    input: str = Field(min_length=1)
    voice: str = Field(min_length=1, max_length=64)
    response_format: str = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    instructions: str | None = Field(None, max_length=4096, description="Accepted, ignored")
    stream_format: Literal["audio"] | None = None


class JobOut(BaseModel):
    id: str
    batch_id: str
    client_id: str
    status: str
    voice: str
    format: str
    sample_rate: int | None
    priority: str
    characters: int
    attempts: int
    renders: int | None = Field(
        None,
        description="Renders the stored audio took: more than one where a bad "
        "check had the job rendered again (SYNTH_RERENDER_BUDGET); null until done",
    )
    seed: int | None = Field(
        None,
        description="The seed of a job rendered again with a new one (its document's "
        "chapter: POST /v1/documents/{id}/rerender); null: the engine's own",
    )
    error: str | None
    audio_seconds: float | None
    ttfb_seconds: float | None
    created_at: datetime
    finished_at: datetime | None
    audio_url: str | None = Field(description="GET it for the audio once status is done")
    stream_url: str
    text_notes: dict[str, int] | None = Field(
        None,
        description="What the text front end changed, when it changed anything: "
        "foreign_chars_dropped, emoji_dropped, tags_removed, readings_expanded, ssml_breaks, "
        "ssml_say_as, rate_ignored, lexicon_entries, lexicon_phonemes_skipped",
    )
    loudness_target: float | None = Field(None, description="LUFS the job was levelled to, if any")
    lexicon_id: str | None = Field(None, description="The lexicon the job renders (or rendered) with, if any")
    lexicon_version: int | None = None
    loudness_lufs: float | None = Field(None, description="Integrated loudness of the stored audio (BS.1770)")
    true_peak_dbtp: float | None = Field(None, description="True peak of the stored audio, dBTP")
    verdict: str | None = Field(
        None,
        description="The check of the audio against its text: clean, suspect, bad "
        "or not_checked; pending while its check waits on the verify queue; null where the job "
        "is not checked (SYNTH_VERIFY)",
    )
    verdict_reasons: list[str] | None = None
    captions_url: str | None = Field(
        None, description="GET it (?format=srt|vtt|json) for the word times, where the job was checked"
    )


class BatchOut(BaseModel):
    id: str
    name: str | None
    status: Literal["queued", "running", "finished", "cancelled"]
    voice: str
    format: str
    sample_rate: int | None
    priority: str
    total: int
    counts: dict[str, int]
    progress: float = Field(description="Finished (done, failed, cancelled) / total")
    audio_seconds: float
    billable_characters: int
    reused: int = Field(
        0,
        description="Done jobs whose audio was copied from an earlier render of the same "
        "identity, for this key (SYNTH_REUSE)",
    )
    reused_seconds: float = Field(0.0, description="The engine seconds those earlier renders took, not spent again")
    webhook_url: str | None
    webhook_events: list[str] | None
    created_at: datetime
    finished_at: datetime | None
    cancelled_at: datetime | None
    expires_at: datetime | None
    loudness_target: float | None = None
    true_peak_max: float | None = None
    lexicon_id: str | None = Field(None, description="The lexicon the batch was made with, if any")
    lexicon_version: int | None = None


class BatchPage(BaseModel):
    data: list[BatchOut]
    next_cursor: str | None


class JobPage(BaseModel):
    data: list[JobOut]
    next_cursor: str | None


class CancelOut(BaseModel):
    cancelled: int


class RetryOut(BaseModel):
    retried: int = Field(description="failed jobs queued again")


class DeleteOut(BaseModel):
    deleted: bool
    objects_removed: int


class Voices(BaseModel):
    engine: str
    default: str | None
    voices: list[str]


class Formats(BaseModel):
    formats: list[str] = Field(description="Stored formats (jobs and batches)")
    sample_rates: list[int]
    stream_formats: list[str] = Field(description="GET /v1/jobs/{id}/stream")
    speech_formats: list[str] = Field(description="POST /v1/audio/speech response_format")


class UsageCounts(BaseModel):
    jobs: int = Field(description="Jobs done")
    chars: int = Field(description="Characters of the jobs done")
    audio_s: float = Field(description="Seconds of audio of the jobs done")


class Quotas(BaseModel):
    chars_per_day: int | None = Field(description="None: no limit")
    audio_s_per_day: float | None = Field(description="None: no limit")
    live_streams: int = Field(description="Live streams this key may hold open at once, per API process")


class UsageOut(BaseModel):
    key_id: str
    name: str
    day: str = Field(description="Today, a UTC day (YYYY-MM-DD); usage is counted when a job is done")
    today: UsageCounts
    month: UsageCounts = Field(description="This UTC month, today included")
    unfinished_chars: int = Field(
        description="Characters of this key's jobs not yet done; they count against chars_per_day"
    )
    quotas: Quotas
    resets_in_s: int = Field(description="Seconds until the day's quotas reset (00:00 UTC)")


class ChapterOut(BaseModel):
    number: int
    title: str
    jobs: int
    done: int
    failed: int
    file_url: str | None = Field(None, description="The chapter's own file, once the document is assembled")
    start_s: float | None = Field(None, description="Where the chapter starts in the whole file")


class DocumentOut(BaseModel):
    id: str = Field(
        description="The document's id, which is also its batch's: /v1/batches/{id} and its items serve its jobs"
    )
    status: Literal["queued", "running", "assembling", "finished", "failed", "cancelled"] = Field(
        description="failed: a job failed (POST /v1/batches/{id}/retry, and the document is assembled once "
        "its jobs are done), or the assembly did (error)"
    )
    title: str
    author: str | None
    format: str
    progress: float = Field(description="Finished jobs / total")
    chapters: list[ChapterOut]
    skipped_chapters: list[str] = Field(description="Chapters left out for having no speakable text")
    duration_s: float | None = None
    file_url: str | None = Field(None, description="The whole document, once assembled")
    chapters_url: str | None = Field(None, description="chapters.json: titles, start and end times, files")
    files: list[str] = Field(description="Every file of the assembled document, by name (GET .../files/{name})")
    error: str | None = Field(None, description="Why the assembly failed, where it did (status failed)")
    batch: BatchOut


class RerenderIn(_In):
    chapters: list[Annotated[int, Field(ge=1, le=9999), BeforeValidator(_whole)]] = Field(
        min_length=1,
        max_length=9999,
        description="Chapters to render again, numbered from 1 as the document's `chapters` are",
    )


class RerenderedChapter(BaseModel):
    number: int
    title: str
    jobs: int = Field(description="The chapter's jobs, queued again")
    seed: int = Field(description="The new seed they render with")


class RerenderOut(BaseModel):
    id: str
    chapters: list[RerenderedChapter]
    queued: int = Field(description="Jobs queued again, in all")
