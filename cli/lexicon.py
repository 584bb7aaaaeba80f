"""`synth lexicon add|remove|list|show|import|export|apply|delete`: the local owner's pronunciation
lexicons (pipeline/lexicon). NAME defaults to `default`, the lexicon every new batch of `synth
submit` reads its words with; a lexicon is created by its first `add` or `import`."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from cli.context import broker, open_database, open_store
from cli.inspect import resolve_batch
from cli.wait import print_summary, wait_again
from pipeline.db.models import as_utc
from pipeline.errors import InputError
from pipeline.lexicon import formats, rerender
from pipeline.lexicon import store as lexicons
from pipeline.lexicon.entries import Entry
from pipeline.plural import counted
from pipeline.settings import Settings
from worker.app import make_producer
from worker.enqueue import check_broker, send_messages

OWNER = lexicons.LOCAL_OWNER
NAME = click.option(
    "--lexicon",
    "name",
    default=lexicons.DEFAULT_NAME,
    show_default=True,
    metavar="NAME",
    help="The lexicon (name or id).",
)


@click.group()
def lexicon() -> None:
    """Pronunciation lexicons: how synth says your names, acronyms and words.

    \b
    Examples:
      synth lexicon add SQL sequel
      synth lexicon add Nguyen 'ŋwɪn' --phoneme          # IPA, Piper only
      synth lexicon import names.pls                      # or `word = says` lines
      synth lexicon apply default --batch nightly          # re-render what a change touches
    """


def _change(name: str, added: list[Entry], removed: Sequence[str] = (), replace: bool = False) -> None:
    """One new version of ``name`` (created where it does not exist), all checked first."""
    settings = Settings()
    _, sessions = open_database(settings)
    checker = lexicons.checker_for(settings.engine_settings())
    with sessions() as session:
        try:
            found = lexicons.find(session, owner=OWNER, ref=name)
        except lexicons.NotFound:
            if removed:
                raise
            found = lexicons.create(session, checker, owner=OWNER, name=name, entries=added)
            changed = True
        else:
            changed = lexicons.change(session, checker, found, added=added, removed=list(removed), replace=replace)
        session.commit()
        what = f"version {found.version}, {counted(found.entry_count, 'entry', 'entries')}"
        click.echo(
            f"lexicon {found.name}: {what}" if changed else f"lexicon {found.name}: no change ({what})", err=True
        )


@lexicon.command()
@click.argument("written")
@click.argument("says")
@click.option("--phoneme", is_flag=True, help="SAYS is IPA (Piper; refused for engines without phoneme input).")
@click.option("--case-sensitive", is_flag=True, help="Match WRITTEN only in this case.")
@click.option("--pattern", is_flag=True, help="WRITTEN is a pattern: * any letters (once), ? one letter.")
@NAME
def add(written: str, says: str, phoneme: bool, case_sensitive: bool, pattern: bool, name: str) -> None:
    """Say WRITTEN as SAYS (other words, or IPA with --phoneme); replaces an entry for WRITTEN."""
    entry = Entry(written, None if phoneme else says, says if phoneme else None, case_sensitive, pattern)
    _change(name, [entry])


@lexicon.command()
@click.argument("written", nargs=-1, required=True)
@NAME
def remove(written: tuple[str, ...], name: str) -> None:
    """Remove the entries for WRITTEN (any case)."""
    _change(name, [], list(written))


@lexicon.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per lexicon.")
def list_(as_json: bool) -> None:
    """List lexicons: id, name, latest version, entries."""
    _, sessions = open_database(Settings())
    with sessions() as session:
        rows = lexicons.list_for(session, owner=OWNER)
    for x in rows:
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "id": x.id,
                        "name": x.name,
                        "version": x.version,
                        "entry_count": x.entry_count,
                        "updated_at": as_utc(x.updated_at).isoformat(),
                    }
                )
            )
        else:
            click.echo(f"{x.id}  {x.name}  v{x.version}  {counted(x.entry_count, 'entry', 'entries')}")


@lexicon.command()
@click.argument("name", default=lexicons.DEFAULT_NAME)
@click.option("--version", "version", type=int, help="This version [default: the latest].")
def show(name: str, version: int | None) -> None:
    """Print a lexicon's entries as `word = says` lines (== : case-sensitive, /.../ : IPA)."""
    click.echo(_entries(name, version, formats.to_text), nl=False)


@lexicon.command("export")
@click.argument("name", default=lexicons.DEFAULT_NAME)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["pls", "text"]),
    default="pls",
    show_default=True,
    help="W3C PLS, or `word = says` lines.",
)
@click.option("--version", "version", type=int, help="This version [default: the latest].")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout.")
def export(name: str, fmt: str, version: int | None, output: Path | None) -> None:
    """Write a lexicon as W3C PLS (or `word = says` text)."""
    text = _entries(name, version, formats.to_pls if fmt == "pls" else formats.to_text)
    if output is None:
        click.echo(text, nl=False)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as e:
            raise InputError(f"{output}: {e.strerror}") from e


def _entries(name: str, version: int | None, render) -> str:
    _, sessions = open_database(Settings())
    with sessions() as session:
        pin = lexicons.pin(session, owner=OWNER, ref=name, version=version)
        return render(lexicons.entries_at(session, pin.lexicon_id, pin.version))


@lexicon.command("import")
@click.argument("file", type=click.Path(allow_dash=True, dir_okay=False, path_type=Path))
@click.option("--replace", is_flag=True, help="The file's entries become the whole lexicon.")
@NAME
def import_(file: Path, replace: bool, name: str) -> None:
    """Add a PLS file's entries, or `word = says` lines (- for stdin), as one new version."""
    try:
        data = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
    except OSError as e:
        raise InputError(f"{file}: {e.strerror}") from e
    _change(name, formats.parse(data), replace=replace)


@lexicon.command("delete")
@click.argument("name")
def delete(name: str) -> None:
    """Delete a lexicon and its versions; jobs still to render with it fail with that reason."""
    _, sessions = open_database(Settings())
    with sessions() as session:
        found = lexicons.find(session, owner=OWNER, ref=name)
        lexicons.delete(session, found)
        session.commit()
    click.echo(f"lexicon {found.name} deleted", err=True)


@lexicon.command()
@click.argument("name")
@click.option("--batch", "batch", required=True, help="The batch (id, id prefix or name) to bring up to date.")
@click.option("--wait/--no-wait", default=None, help="Wait for the re-rendered jobs. Embedded mode always waits.")
def apply(name: str, batch: str, wait: bool | None) -> None:
    """Re-render, with NAME's latest version, only the jobs of BATCH whose text a changed entry
    touches; the other jobs and their audio stay as they are."""
    settings = Settings()
    _, sessions = open_database(settings)
    store = open_store(settings)
    with sessions() as session:  # a typo is refused before a broker is started
        batch_id = resolve_batch(session, batch, "applying a lexicon to").id
        lexicons.find(session, owner=OWNER, ref=name)
    with broker(settings) as broker_url:
        app = make_producer(settings, broker_url)
        check_broker(app)
        with sessions() as session:
            found = lexicons.find(session, owner=OWNER, ref=name)
            plan = rerender.plan(session, store, found, owner=OWNER, batch_id=batch_id)
            session.commit()
        send_messages(app, plan.by_queue, settings.jobs_per_task)
        click.echo(
            f"batch {batch_id}: {counted(plan.rerendered, 'job')} re-rendered with {found.name} "
            f"version {found.version}, {plan.untouched} untouched",
            err=True,
        )
        if not plan.rerendered:
            return
        summary = wait_again(settings, broker_url, sessions, batch_id, wait=wait)
        if summary is None:
            return
    print_summary(summary)
    if summary.counts.get("failed"):
        sys.exit(1)
