"""`synth submit`"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click
from sqlalchemy.orm import Session
from tqdm import tqdm

from cli.context import broker, open_database, open_store
from cli.interrupts import WithdrawRequested, counted_interrupts
from cli.wait import embedded_worker, print_summary, wait_for_batch
from pipeline.corpus import parse_corpus
from pipeline.documents import DOCUMENT_KINDS, kind_for
from pipeline.errors import EngineUnavailableError, InputError, ServiceUnavailableError
from pipeline.plural import counted
from pipeline.settings import FORMATS, Settings
from pipeline.submit import BatchOptions, create_batch, resolve_options, withdraw_batch
from worker.app import make_producer
from worker.enqueue import check_broker, enqueue_batch


PROGRESS_FROM = 5000   # lines: a corpus this long shows its enqueue's progress


@click.command()
@click.argument("corpus", type=click.Path(allow_dash=True, dir_okay=False, path_type=Path))
@click.option("--document", type=click.Choice(DOCUMENT_KINDS),
              help="Read CORPUS as a document of chapters, whatever its name says [default: .md and "
                   ".markdown are markdown, .epub is epub; anything else is a corpus of lines].")
@click.option("--title", help="A document's title [default: its own, else the file's name].")
@click.option("--author", help="A document's author [default: its own, if it names one].")
@click.option("--cover", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A JPEG or PNG cover for a document's m4b or mp3.")
@click.option("--voice", help="Voice name [default: SYNTH_DEFAULT_VOICE, else the engine's first voice].")
@click.option("--format", "fmt", type=click.Choice((*FORMATS, "m4b")),
              help="Audio format [default: SYNTH_DEFAULT_FORMAT, else wav; a document: m4b].")
@click.option("--sample-rate", type=int, help="Output sample rate in Hz [default: the engine's].")
@click.option("--priority", type=click.Choice(["batch", "realtime"]), default="batch", show_default=True,
              help="realtime: each job goes ahead of batch work, as an API stream does.")
@click.option("--name", help="A name for the batch, usable instead of its id.")
@click.option("--loudness", type=float, metavar="LUFS",
              help="Level every job to this integrated loudness (EBU R128), e.g. -16 for podcasts "
                   "[default: as rendered; each job's loudness is measured and recorded either way].")
@click.option("--true-peak", type=float, metavar="DBTP",
              help="The true-peak ceiling of levelled jobs [default: -1; lossy formats keep 1 dB more].")
@click.option("--wait/--no-wait", default=None,
              help="Wait for the batch to finish. Embedded mode always waits; with SYNTH_REDIS_URL "
                   "the default is to enqueue and return.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="After finishing, copy the audio and manifest here (implies --wait).")
def submit(corpus: Path, document, title, author, cover, voice, fmt, sample_rate, priority, name, loudness,
           true_peak, wait, output) -> None:
    """Synthesize every non-empty line of CORPUS (a UTF-8 text file, or - for stdin) as one job,
    or a document (Markdown, plain text, EPUB) as one file with chapters.

    \b
    Examples:
      synth submit corpus.txt --voice joe --format mp3 -o out/
      synth submit chapter.txt --format mp3 --loudness -16 -o out/
      cat lines.txt | synth submit - --name nightly --no-wait
      synth submit book.epub --format m4b --author "A. Writer" --cover cover.jpg -o out/
    """
    settings = Settings()
    source = "-" if str(corpus) == "-" else str(corpus)
    data = _read(corpus)
    kind = document or (None if source == "-" else kind_for(source))
    if kind is not None:
        from cli.document import DocumentRequest, submit_document

        submit_document(settings, DocumentRequest(
            data=data, kind=kind, source=source, title=title, author=author, cover=cover, format=fmt or "m4b",
            loudness=loudness, options=BatchOptions(voice=voice, sample_rate=sample_rate, priority=priority,
                                                    name=name)), wait=wait, output=output)
        return
    if fmt == "m4b" or title or author or cover:
        raise InputError("--format m4b, --title, --author and --cover are for documents (.md, .epub, --document)")
    parsed = parse_corpus(data, source=source, max_line_chars=settings.max_line_chars)
    options = resolve_options(settings, BatchOptions(voice=voice, format=fmt, sample_rate=sample_rate,
                                                     priority=priority, name=name, loudness=loudness,
                                                     true_peak=true_peak))
    skipped = (f", {counted(len(parsed.empty_lines), 'empty line skipped', 'empty lines skipped')}"
               if parsed.empty_lines else "")
    result = run_batch(settings, lambda session: create_batch(session, settings, parsed, options, source=source).id,
                       total=len(parsed.lines), name=name, note=skipped, wait=wait, output=output)
    if result is None:
        return
    summary, sessions = result
    if output:
        from cli.inspect import fetch_batch

        fetch_batch(settings, sessions, summary.batch_id, output)
    if summary.counts.get("failed"):
        sys.exit(1)


def run_batch(settings: Settings, create: Callable[[Session], str], *, total: int, name: str | None, note: str,
              wait: bool | None, output: Path | None, on_poll: Callable[[Session], None] | None = None):
    """Write a batch (``create`` returns its id), enqueue it and, where asked or embedded, wait for
    it. Returns (its summary, the session maker), or None where it was only enqueued."""
    _, sessions = open_database(settings)
    store = open_store(settings)
    embedded = settings.redis_url is None
    with broker(settings) as broker_url:
        app = make_producer(settings, broker_url)
        check_broker(app)
        batch_id, interrupted = _write_and_enqueue(settings, sessions, store, app, create, total)
        click.echo(f"batch {batch_id}{f' ({name})' if name else ''}: "
                   + counted(total, "job queued", "jobs queued") + note, err=True)
        if interrupted:
            who = "`synth worker` (same SYNTH_DATA_DIR) renders them" if embedded else "the workers render them"
            click.echo(f"interrupted: batch {batch_id} is queued whole; {who}; `synth cancel {batch_id}` stops it, "
                       f"`synth status {batch_id}` shows progress", err=True)
            sys.exit(130)
        if not (embedded or wait or output):
            click.echo(batch_id)
            return None
        if embedded:  # the message comes before the worker's warm shutdown, which may take a while
            try:
                with embedded_worker(settings, broker_url) as child, _told_when_interrupted(batch_id, embedded):
                    summary = wait_for_batch(sessions, batch_id, alive=child.alive, on_poll=on_poll)
            except EngineUnavailableError as e:
                # Nothing ran; kept, the batch would render on whichever worker starts next, beside
                # the one submitted again once the setting is fixed.
                withdraw_batch(sessions, store, batch_id)
                raise EngineUnavailableError(f"{e}; batch {batch_id} was withdrawn, nothing was rendered: "
                                             "fix the setting and submit again") from e
        else:
            with _told_when_interrupted(batch_id, embedded):
                summary = wait_for_batch(sessions, batch_id, on_poll=on_poll)
    print_summary(summary)
    return summary, sessions


def _write_and_enqueue(settings, sessions, store, app, create, total: int) -> tuple[str, bool]:
    """Write the batch and send its messages, Ctrl-C counted meanwhile (cli/interrupts.py). Returns
    the batch id and whether Ctrl-C was pressed; exits 130 once the batch is withdrawn on a second."""
    with counted_interrupts() as interrupts:
        with sessions() as session:
            try:
                batch_id = create(session)
                session.commit()
            except BaseException:   # a document's outline may be in the store: nothing half-written
                session.rollback()
                raise
        if total >= PROGRESS_FROM:   # the id, before a long enqueue
            click.echo(f"batch {batch_id}: enqueuing {counted(total, 'job')}", err=True)

        def progress(n: int) -> None:
            bar.update(n)
            interrupts.check(batch_id)
        try:
            with tqdm(total=total, desc="enqueue", unit="job", disable=total < PROGRESS_FROM,
                      file=sys.stderr) as bar:
                interrupts.check(batch_id)
                enqueue_batch(app, sessions, batch_id, settings.jobs_per_task, progress=progress)
        except ServiceUnavailableError:  # nothing half-written: the batch is withdrawn everywhere
            withdraw_batch(sessions, store, batch_id)
            raise
        except WithdrawRequested:
            withdraw_batch(sessions, store, batch_id)
            click.echo(f"interrupted: batch {batch_id} withdrawn; the messages already sent find no job "
                       "and are dropped; nothing of it renders", err=True)
            sys.exit(130)
        return batch_id, interrupts.count > 0


@contextlib.contextmanager
def _told_when_interrupted(batch_id: str, embedded: bool) -> Iterator[None]:
    """Ctrl-C stops the wait, not the batch: its jobs stay queued. Say so, and how to finish them."""
    try:
        yield
    except KeyboardInterrupt:
        who = "`synth worker` (same SYNTH_DATA_DIR) finishes them" if embedded else "the workers finish them"
        click.echo(f"\ninterrupted: batch {batch_id}'s unfinished jobs stay queued; {who}; "
                   f"`synth status {batch_id}` shows progress, `synth fetch {batch_id}` gets the audio", err=True)
        raise


def _read(corpus: Path) -> bytes:
    if str(corpus) == "-":
        return sys.stdin.buffer.read()
    try:
        return corpus.read_bytes()
    except OSError as e:
        raise InputError(f"{corpus}: {e.strerror}") from e
