"""`synth submit`"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from cli.inspect import fetch_batch, writable_folder
from cli.running import pin_lexicon, run_batch
from pipeline.corpus import parse_corpus
from pipeline.documents import DOCUMENT_KINDS, kind_for
from pipeline.errors import InputError
from pipeline.plural import counted
from pipeline.settings import FORMATS, Settings
from pipeline.submit import BatchOptions, create_batch, resolve_options


@click.command()
@click.argument("corpus", type=click.Path(allow_dash=True, dir_okay=False, path_type=Path))
@click.option(
    "--document",
    type=click.Choice(DOCUMENT_KINDS),
    help="Read CORPUS as a document of chapters, whatever its name says [default: .md and "
    ".markdown are markdown, .epub is epub; anything else is a corpus of lines].",
)
@click.option("--title", help="A document's title [default: its own, else the file's name].")
@click.option("--author", help="A document's author [default: its own, if it names one].")
@click.option(
    "--cover",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A JPEG or PNG cover for a document's m4b or mp3.",
)
@click.option("--voice", help="Voice name [default: SYNTH_DEFAULT_VOICE, else the engine's first voice].")
@click.option(
    "--format",
    "fmt",
    type=click.Choice((*FORMATS, "m4b")),
    help="Audio format [default: SYNTH_DEFAULT_FORMAT, else wav; a document: m4b].",
)
@click.option("--sample-rate", type=int, help="Output sample rate in Hz [default: the engine's].")
@click.option(
    "--priority",
    type=click.Choice(["batch", "realtime"]),
    default="batch",
    show_default=True,
    help="realtime: each job goes ahead of batch work, as an API stream does.",
)
@click.option("--name", help="A name for the batch, usable instead of its id.")
@click.option(
    "--loudness",
    type=float,
    metavar="LUFS",
    help="Level every job to this integrated loudness (EBU R128), e.g. -16 for podcasts "
    "[default: as rendered; each job's loudness is measured and recorded either way].",
)
@click.option(
    "--true-peak",
    type=float,
    metavar="DBTP",
    help="The true-peak ceiling of levelled jobs [default: -1; lossy formats keep 1 dB more].",
)
@click.option(
    "--lexicon",
    metavar="NAME",
    help="Pronunciation lexicon (`synth lexicon`) [default: the lexicon named default, if any].",
)
@click.option("--lexicon-version", type=int, metavar="N", help="Pin this version [default: the latest].")
@click.option(
    "--wait/--no-wait",
    default=None,
    help="Wait for the batch to finish. Embedded mode always waits; with SYNTH_REDIS_URL "
    "the default is to enqueue and return.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="After finishing, copy the audio and manifest here (implies --wait).",
)
def submit(corpus: Path, **given) -> None:
    """Synthesize every non-empty line of CORPUS (a UTF-8 text file, or - for stdin) as one job,
    or a document (Markdown, plain text, EPUB) as one file with chapters.

    \b
    Examples:
      synth submit corpus.txt --voice joe --format mp3 -o out/
      synth submit chapter.txt --format mp3 --loudness -16 -o out/
      cat lines.txt | synth submit - --name nightly --no-wait
      synth submit book.epub --format m4b --author "A. Writer" --cover cover.jpg -o out/
    """
    settings, asked = Settings(), Asked(**given)
    source = "-" if str(corpus) == "-" else str(corpus)
    data = _read(corpus)
    kind = asked.document or (None if source == "-" else kind_for(source))
    if kind is not None:
        _submit_document(settings, data, kind, source, asked)
        return
    if asked.fmt == "m4b" or asked.title or asked.author or asked.cover:
        raise InputError("--format m4b, --title, --author and --cover are for documents (.md, .epub, --document)")
    options = BatchOptions(
        voice=asked.voice,
        format=asked.fmt,
        sample_rate=asked.sample_rate,
        priority=asked.priority,
        name=asked.name,
        loudness=asked.loudness,
        true_peak=asked.true_peak,
    )
    _submit_lines(settings, data, source, options, (asked.lexicon, asked.lexicon_version), asked.wait, asked.output)


@dataclasses.dataclass(frozen=True)
class Asked:
    """`synth submit`'s options as click parsed them (its parameters' names)."""

    document: str | None
    title: str | None
    author: str | None
    cover: Path | None
    voice: str | None
    fmt: str | None
    sample_rate: int | None
    priority: str
    name: str | None
    loudness: float | None
    true_peak: float | None
    lexicon: str | None
    lexicon_version: int | None
    wait: bool | None
    output: Path | None


def _submit_document(settings: Settings, data: bytes, kind: str, source: str, asked: Asked) -> None:
    from cli.document import DocumentRequest, submit_document

    options = BatchOptions(voice=asked.voice, sample_rate=asked.sample_rate, priority=asked.priority, name=asked.name)
    submit_document(
        settings,
        DocumentRequest(
            data=data,
            kind=kind,
            source=source,
            title=asked.title,
            author=asked.author,
            cover=asked.cover,
            format=asked.fmt or "m4b",
            loudness=asked.loudness,
            true_peak=asked.true_peak,
            lexicon=asked.lexicon,
            lexicon_version=asked.lexicon_version,
            options=options,
        ),
        wait=asked.wait,
        output=asked.output,
    )


def _submit_lines(
    settings: Settings,
    data: bytes,
    source: str,
    options: BatchOptions,
    lexicon: tuple[str | None, int | None],
    wait: bool | None,
    output: Path | None,
) -> None:
    """A corpus of lines as a batch (``lexicon``: the name and version asked for); exits 1 when a
    job failed."""
    parsed = parse_corpus(data, source=source, max_line_chars=settings.max_line_chars)
    if output:
        writable_folder(output)  # after the input is read, before it renders: bad input writes nothing
    options = dataclasses.replace(resolve_options(settings, options), lexicon=pin_lexicon(settings, *lexicon))
    skipped = (
        f", {counted(len(parsed.empty_lines), 'empty line skipped', 'empty lines skipped')}"
        if parsed.empty_lines
        else ""
    )
    result = run_batch(
        settings,
        lambda session: create_batch(session, settings, parsed, options, source=source).id,
        total=len(parsed.lines),
        name=options.name,
        note=skipped,
        wait=wait,
        output=output,
    )
    if result is None:
        return
    summary, sessions = result
    if output:
        fetch_batch(settings, sessions, summary.batch_id, output)
    if summary.counts.get("failed"):
        sys.exit(1)


def _read(corpus: Path) -> bytes:
    if str(corpus) == "-":
        return sys.stdin.buffer.read()
    try:
        return corpus.read_bytes()
    except OSError as e:
        raise InputError(f"{corpus}: {e.strerror}") from e
