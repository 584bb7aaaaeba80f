"""`synth submit` for a document (Markdown, plain text, EPUB), `synth assemble` and `synth rerender`."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import click
from sqlalchemy import select
from tqdm import tqdm

from cli.context import broker, open_database, open_store
from cli.inspect import resolve_batch, writable_folder
from cli.running import pin_lexicon, run_batch
from cli.wait import print_summary, wait_again
from pipeline.db.models import TERMINAL, Job
from pipeline.documents import read_document
from pipeline.documents import rerender as chapters_again
from pipeline.documents.ahead import DocumentAhead
from pipeline.documents.batch import assemble_batch, create_document_batch, load_outline, plan_outline
from pipeline.documents.plan import ASSEMBLED_FORMATS, JOB_FORMAT, client_id_for, document_jobs, place_of
from pipeline.errors import InputError
from pipeline.manifest import manifest_lines
from pipeline.plural import counted
from pipeline.settings import Settings
from pipeline.submit import BatchOptions, resolve_options
from worker.app import make_producer
from worker.enqueue import check_broker, send_messages


@dataclass(frozen=True)
class DocumentRequest:
    data: bytes
    kind: str
    source: str
    title: str | None
    author: str | None
    cover: Path | None
    format: str
    loudness: float | None
    true_peak: float | None
    lexicon: str | None
    lexicon_version: int | None
    options: BatchOptions


def submit_document(settings: Settings, request: DocumentRequest, *, wait: bool | None, output: Path | None) -> None:
    doc = read_document(request.data, request.kind, source=request.source, max_bytes=settings.max_document_bytes)
    for title in doc.skipped:
        click.echo(f"skipped chapter {title!r}: no speakable text", err=True)
    outline = plan_outline(
        settings,
        doc,
        fmt=request.format,
        title=request.title,
        author=request.author,
        fallback_title="document" if request.source == "-" else Path(request.source).stem,
        loudness_target=request.loudness,
        true_peak=request.true_peak,
    )
    cover = _read_cover(request.cover)
    # The voice and rate are refused here, before a broker or worker is started for them.
    resolve_options(
        settings, BatchOptions(voice=request.options.voice, format=JOB_FORMAT, sample_rate=request.options.sample_rate)
    )
    options = dataclasses.replace(
        request.options, lexicon=pin_lexicon(settings, request.lexicon, request.lexicon_version)
    )
    jobs = document_jobs(doc, settings.max_line_chars)
    if output:
        writable_folder(output)  # after the document is read, before it renders: bad input writes nothing
    store = open_store(settings)
    progress = ChapterProgress([c.title for c in doc.chapters], {client_id_for(p): len(t) for p, t in jobs})
    # With -o, each chapter is encoded as soon as its jobs are done, while the others render.
    ahead = DocumentAhead(store, output) if output else None
    try:
        result = run_batch(
            settings,
            lambda session: (
                create_document_batch(
                    session, store, settings, doc, outline, options, source=request.source, cover=cover
                ).id
            ),
            total=len(jobs),
            name=request.options.name,
            wait=wait,
            output=output,
            on_poll=_polled(progress, ahead),
            note=f" ({counted(len(doc.chapters), 'chapter')}, {counted(doc.paragraphs, 'paragraph')})",
        )
    finally:
        if ahead is not None:  # an interrupted wait leaves only the chapters already running
            ahead.finish(cancel=sys.exc_info()[0] is not None)
    if result is not None:
        _finished(settings, result, outline.format, output, ahead)


def _finished(settings: Settings, result, fmt: str, output: Path | None, ahead: DocumentAhead | None) -> None:
    """The document's jobs are done: assembled into ``output``; with none, how to assemble it;
    exits 1 where a job failed or was cancelled."""
    summary, sessions = result
    if summary.counts.get("failed") or summary.counts.get("cancelled"):
        click.echo(
            f"not assembled: some jobs did not finish; `synth retry {summary.batch_id}`, then "
            f"`synth assemble {summary.batch_id} -o DIR`",
            err=True,
        )
        sys.exit(1)
    if output is None:
        click.echo(f"`synth assemble {summary.batch_id} -o DIR` writes the {fmt}", err=True)
        return
    _assemble(settings, sessions, summary.batch_id, output, None, ahead=ahead)


def _polled(progress: ChapterProgress, ahead: DocumentAhead | None):
    """The wait's ``on_poll``: the chapters said, and encoded ahead where the files are wanted."""

    def on_poll(session, batch_id: str) -> None:
        progress(session, batch_id)
        if ahead is not None:
            ahead(session, batch_id)

    return on_poll


class ChapterProgress:
    """Says each chapter as its last job finishes, with an estimate of the time left from the
    pace so far (by characters, since a chapter's jobs differ in length)."""

    def __init__(self, titles: list[str], job_chars: dict[str, int]) -> None:
        """``job_chars``: the characters of each job followed, by client id (those of the chapters
        rendered, of a rerender)."""
        self.titles = titles
        self.chars: Counter[int] = Counter()
        self.jobs: Counter[int] = Counter()
        self.job_chars = job_chars
        for client_id, chars in job_chars.items():
            place = place_of(client_id)
            if place is None:  # not a document's job: nothing to say of it by chapter
                continue
            chapter = place.chapter
            self.jobs[chapter] += 1
            self.chars[chapter] += chars
        self.said: set[int] = set()
        self.started = time.monotonic()

    def __call__(self, session, batch_id: str) -> None:
        query = select(Job.client_id).where(Job.batch_id == batch_id, Job.status.in_(TERMINAL))
        finished = [cid for cid in session.execute(query).scalars() if cid in self.job_chars]
        done: Counter[int] = Counter(place.chapter for cid in finished if (place := place_of(cid)) is not None)
        chars_done = sum(self.job_chars[cid] for cid in finished)
        for n in sorted(done):
            if n not in self.said and done[n] >= self.jobs[n]:
                self.said.add(n)
                left = sum(self.chars.values()) - chars_done
                pace = (time.monotonic() - self.started) / max(chars_done, 1)
                eta = f", about {left * pace:,.0f} s left" if left else ""
                tqdm.write(f"chapter {n}/{len(self.titles)} rendered: {self.titles[n - 1]}{eta}", file=sys.stderr)


def _assemble(
    settings: Settings, sessions, batch_id: str, output: Path, fmt: str | None, ahead: DocumentAhead | None = None
) -> None:
    store = open_store(settings)
    started = time.monotonic()
    found = ahead.assembled() if ahead is not None else None
    with sessions() as session:
        done, took = found or (assemble_batch(session, store, batch_id, output, fmt=fmt), None)
        lines = manifest_lines(session, store, batch_id)
    (output / "manifest.jsonl").write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8"
    )
    click.echo(
        f"wrote {done.whole} ({done.duration_s:,.1f} s, {counted(len(done.chapters), 'chapter')}), "
        f"{counted(len(done.chapter_files), 'chapter file')}, chapters.json and manifest.jsonl to {output} "
        f"in {took if took is not None else time.monotonic() - started:,.1f} s",
        err=True,
    )


def _read_cover(path: Path | None) -> bytes | None:
    if path is None:
        return None
    data = path.read_bytes()
    if not data.startswith((b"\x89PNG", b"\xff\xd8")):
        raise InputError(f"{path}: the cover must be a JPEG or PNG image")
    return data


@click.command()
@click.argument("batch")
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for the whole file, one file per chapter, chapters.json and manifest.jsonl.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(ASSEMBLED_FORMATS),
    help="The whole file's format [default: the one the document was submitted with].",
)
def assemble(batch: str, output: Path, fmt: str | None) -> None:
    """Assemble a rendered document's audio into one file with chapters (again, if it was). BATCH
    is an id, id prefix or name."""
    settings = Settings()
    _, sessions = open_database(settings)
    with sessions() as session:
        batch_id = resolve_batch(session, batch, "assembling").id
    _assemble(settings, sessions, batch_id, output, fmt)


@click.command()
@click.argument("document")
@click.option(
    "--chapter",
    "chapters",
    type=int,
    multiple=True,
    required=True,
    metavar="N",
    help="A chapter to render again, numbered from 1 as `synth submit`'s progress and chapters.json "
    "count them; give --chapter again for more.",
)
@click.option(
    "--wait/--no-wait",
    default=None,
    help="Wait for the chapters to render. Embedded mode always waits; with SYNTH_REDIS_URL the "
    "default is to enqueue and return.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="Once rendered, assemble the whole file, each chapter's file, chapters.json and "
    "manifest.jsonl here (implies --wait).",
)
def rerender(document: str, chapters: tuple[int, ...], wait: bool | None, output: Path | None) -> None:
    """Render chapters of a rendered document again, each with a new seed, then assemble it
    again: the other chapters keep their audio, and their files come out the same. DOCUMENT is
    its batch's id (as `synth submit` printed it), an id prefix or its --name.

    \b
    Examples:
      synth rerender 3f9c2a --chapter 2 -o out/
      synth rerender voyage --chapter 2 --chapter 5 --no-wait
    """
    settings = Settings()
    _, sessions = open_database(settings)
    store = open_store(settings)
    with sessions() as session:  # a typo is refused before a broker is started
        batch_id = resolve_batch(session, document, "rendering again").id
        chapters_again.plan(session, store, batch_id, chapters)
    if output:
        writable_folder(output)  # after the request is checked, before anything is queued
    with broker(settings) as broker_url:
        app = make_producer(settings, broker_url)
        check_broker(app)
        with sessions() as session:
            planned = chapters_again.plan(session, store, batch_id, chapters)
            chapters_again.queue(session, store, planned)
            session.commit()
        # Sent after the commit; a job whose message is lost here is re-sent by the reconciler.
        send_messages(app, planned.by_queue(), settings.jobs_per_task)
        for n, ids in sorted(planned.jobs.items()):
            click.echo(
                f"chapter {n} ({planned.titles[n]}): {counted(len(ids), 'job queued', 'jobs queued')} "
                f"again with seed {planned.seeds[n]}",
                err=True,
            )
        progress = ChapterProgress(load_outline(store, batch_id).chapters, planned.chars)
        ahead = DocumentAhead(store, output) if output else None  # as `synth submit -o` does
        try:
            summary = wait_again(
                settings, broker_url, sessions, batch_id, wait=bool(wait or output), on_poll=_polled(progress, ahead)
            )
        finally:
            if ahead is not None:
                ahead.finish(cancel=sys.exc_info()[0] is not None)
    if summary is None:
        click.echo(
            f"`synth status {batch_id}` shows progress; `synth assemble {batch_id} -o DIR` writes the "
            "document once it is done",
            err=True,
        )
        return
    print_summary(summary)
    if summary.counts.get("failed"):
        click.echo(
            f"not assembled: some jobs failed; `synth retry {batch_id}`, then `synth assemble {batch_id} -o DIR`",
            err=True,
        )
        sys.exit(1)
    if output is None:
        click.echo(f"`synth assemble {batch_id} -o DIR` writes the document with the new chapters", err=True)
        return
    _assemble(settings, sessions, batch_id, output, None, ahead=ahead)
