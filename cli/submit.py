"""`synth submit`"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import click
from tqdm import tqdm

from cli.context import broker, open_database, open_store
from cli.inspect import fetch_batch, writable_folder
from cli.interrupts import WithdrawRequested, counted_interrupts
from cli.wait import embedded_worker, print_summary, wait_for_batch
from pipeline.corpus import parse_corpus
from pipeline.errors import EngineUnavailableError, InputError, ServiceUnavailableError
from pipeline.plural import counted
from pipeline.settings import FORMATS, Settings
from pipeline.lexicon import store as lexicons
from pipeline.submit import BatchOptions, create_batch, resolve_options, withdraw_batch
from worker.app import make_producer
from worker.enqueue import check_broker, enqueue_batch


PROGRESS_FROM = 5000   # lines: a corpus this long shows its enqueue's progress


@click.command()
@click.argument("corpus", type=click.Path(allow_dash=True, dir_okay=False, path_type=Path))
@click.option("--voice", help="Voice name [default: SYNTH_DEFAULT_VOICE, else the engine's first voice].")
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="Audio format [default: SYNTH_DEFAULT_FORMAT, else wav].")
@click.option("--sample-rate", type=int, help="Output sample rate in Hz [default: the engine's].")
@click.option("--priority", type=click.Choice(["batch", "realtime"]), default="batch", show_default=True,
              help="realtime: each job goes ahead of batch work, as an API stream does.")
@click.option("--name", help="A name for the batch, usable instead of its id.")
@click.option("--loudness", type=float, metavar="LUFS",
              help="Level every job to this integrated loudness (EBU R128), e.g. -16 for podcasts "
                   "[default: as rendered; each job's loudness is measured and recorded either way].")
@click.option("--true-peak", type=float, metavar="DBTP",
              help="The true-peak ceiling of levelled jobs [default: -1; lossy formats keep 1 dB more].")
@click.option("--lexicon", metavar="NAME",
              help="Pronunciation lexicon (`synth lexicon`) [default: the lexicon named default, if any].")
@click.option("--lexicon-version", type=int, metavar="N", help="Pin this version [default: the latest].")
@click.option("--wait/--no-wait", default=None,
              help="Wait for the batch to finish. Embedded mode always waits; with SYNTH_REDIS_URL "
                   "the default is to enqueue and return.")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="After finishing, copy the audio and manifest here (implies --wait).")
def submit(corpus: Path, voice, fmt, sample_rate, priority, name, loudness, true_peak, lexicon, lexicon_version,
           wait, output) -> None:
    """Synthesize every non-empty line of CORPUS (a UTF-8 text file, or - for stdin) as one job.

    \b
    Examples:
      synth submit corpus.txt --voice joe --format mp3 -o out/
      synth submit chapter.txt --format mp3 --loudness -16 -o out/
      cat lines.txt | synth submit - --name nightly --no-wait
    """
    settings = Settings()
    source = "-" if str(corpus) == "-" else str(corpus)
    data = _read(corpus)
    parsed = parse_corpus(data, source=source, max_line_chars=settings.max_line_chars)
    options = resolve_options(settings, BatchOptions(voice=voice, format=fmt, sample_rate=sample_rate,
                                                     priority=priority, name=name, loudness=loudness,
                                                     true_peak=true_peak))
    if output:
        writable_folder(output)   # before the batch renders, not after: bad input writes nothing
    _, sessions = open_database(settings)
    with sessions() as session:   # the version is taken now: later changes do not reach this batch
        options = dataclasses.replace(options, lexicon=lexicons.pin(
            session, owner=lexicons.LOCAL_OWNER, ref=lexicon, version=lexicon_version))
    store = open_store(settings)
    embedded = settings.redis_url is None
    with broker(settings) as broker_url:
        app = make_producer(settings, broker_url)
        check_broker(app)
        batch_id, interrupted = _write_and_enqueue(settings, sessions, store, app, parsed, options, source)
        click.echo(f"batch {batch_id}{f' ({name})' if name else ''}: "
                   + counted(len(parsed.lines), "job queued", "jobs queued")
                   + (f", {counted(len(parsed.empty_lines), 'empty line skipped', 'empty lines skipped')}"
                      if parsed.empty_lines else ""), err=True)
        if interrupted:
            who = "`synth worker` (same SYNTH_DATA_DIR) renders them" if embedded else "the workers render them"
            click.echo(f"interrupted: batch {batch_id} is queued whole; {who}; `synth cancel {batch_id}` stops it, "
                       f"`synth status {batch_id}` shows progress", err=True)
            sys.exit(130)
        if not (embedded or wait or output):
            click.echo(batch_id)
            return
        if embedded:  # the message comes before the worker's warm shutdown, which may take a while
            try:
                with embedded_worker(settings, broker_url) as child, _told_when_interrupted(batch_id, embedded):
                    summary = wait_for_batch(sessions, batch_id, alive=child.alive)
            except EngineUnavailableError as e:
                # Nothing ran; kept, the batch would render on whichever worker starts next, beside
                # the one submitted again once the setting is fixed.
                withdraw_batch(sessions, store, batch_id)
                raise EngineUnavailableError(f"{e}; batch {batch_id} was withdrawn, nothing was rendered: "
                                             "fix the setting and submit again") from e
        else:
            with _told_when_interrupted(batch_id, embedded):
                summary = wait_for_batch(sessions, batch_id)
    print_summary(summary)
    if output:
        fetch_batch(settings, sessions, batch_id, output)
    if summary.counts.get("failed"):
        sys.exit(1)


def _write_and_enqueue(settings, sessions, store, app, parsed, options, source) -> tuple[str, bool]:
    """Write the batch and send its messages, Ctrl-C counted meanwhile (cli/interrupts.py). Returns
    the batch id and whether Ctrl-C was pressed; exits 130 once the batch is withdrawn on a second."""
    with counted_interrupts() as interrupts:
        with sessions() as session:
            batch_id = create_batch(session, settings, parsed, options, source=source).id
            session.commit()
        if len(parsed.lines) >= PROGRESS_FROM:   # the id, before a long enqueue
            click.echo(f"batch {batch_id}: enqueuing {counted(len(parsed.lines), 'job')}", err=True)

        def progress(n: int) -> None:
            bar.update(n)
            interrupts.check(batch_id)
        try:
            with tqdm(total=len(parsed.lines), desc="enqueue", unit="job", disable=len(parsed.lines) < PROGRESS_FROM,
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
