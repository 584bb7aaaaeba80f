"""`synth status` and `synth fetch`"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import redis
from tqdm import tqdm

from cli.context import open_database
from cli.wait import print_summary
from pipeline import deadletter
from pipeline.db import jobs as db
from pipeline.db.models import JobStatus
from pipeline.errors import InputError
from pipeline.live import redis_client_url
from pipeline.manifest import file_names, manifest_lines
from pipeline.plural import counted
from pipeline.settings import Settings
from pipeline.storage import make_store
from pipeline.storage.base import manifest_key
from pipeline.summary import summarize
from pipeline.verify.jobs import CAPTION_TYPES, caption_key
from worker.embedded import EmbeddedRedis


def _dead_letters(settings: Settings) -> int | None:
    """The length of the fleet's dead-letter list; None when Redis is not there to ask (the
    embedded one is asked only while another command runs it)."""
    url = settings.redis_url or EmbeddedRedis(settings.data_dir).url
    client = redis.Redis.from_url(redis_client_url(url), socket_connect_timeout=2, socket_timeout=5)
    try:
        return deadletter.count(client)
    except (redis.RedisError, OSError):
        return None
    finally:
        client.close()


def resolve_batch(session, ref: str, doing: str):
    """The batch ``ref`` names; a name several batches share resolves to the newest, and says so
    (``doing``: what the command does with it), since the others are then reached only by id."""
    batch = db.find_batch(session, ref)
    if batch is None:
        raise InputError(f"no batch {ref!r} (give its id, an id prefix of 6+ characters, or its name)")
    if batch.name == ref and not batch.id.startswith(ref):
        named = db.count_batches_named(session, ref)
        if named > 1:
            click.echo(
                f"{named} batches are named {ref}; {doing} the newest, {batch.id}; use an id for another", err=True
            )
    return batch


@click.command()
@click.argument("batch")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def status(batch: str, as_json: bool) -> None:
    """Show a batch's progress and numbers. BATCH is an id, id prefix or name (the newest
    batch of that name)."""
    settings = Settings()
    _, sessions = open_database(settings)
    with sessions() as session:
        summary = summarize(session, resolve_batch(session, batch, "showing"))
    dead_letters = _dead_letters(settings)
    if as_json:
        out = {k: v for k, v in vars(summary).items()}
        out["x_real_time"] = summary.x_real_time
        out["finished"] = summary.finished
        out["dead_letters"] = dead_letters
        click.echo(json.dumps(out, indent=2, default=str))
        return
    print_summary(summary)
    if dead_letters:
        click.echo(
            f"{counted(dead_letters, 'message')} in {deadletter.DEADLETTER}: taken off a queue but not "
            "a task synth can run (see docs/operations.md)",
            err=True,
        )
    open_jobs = sum(summary.counts.get(s.value, 0) for s in JobStatus if not s.terminal)
    if open_jobs:
        click.echo(
            f"{counted(open_jobs, 'job')} not finished: "
            + ", ".join(f"{n} {s}" for s, n in summary.counts.items() if n and not JobStatus(s).terminal),
            err=True,
        )


@click.command()
@click.argument("batch")
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Folder to write the audio files and manifest.jsonl into.",
)
@click.option(
    "--captions/--no-captions",
    default=True,
    show_default=True,
    help="Also write each checked job's word times beside its audio: NAME.srt, NAME.vtt and "
    "NAME.words.json (SYNTH_VERIFY says which jobs are checked).",
)
def fetch(batch: str, output: Path, captions: bool) -> None:
    """Download a batch's audio files (named by client id, -2, -3 ... where two ids make one name)
    and its manifest. BATCH is an id, id prefix or name (the newest batch of that name)."""
    settings = Settings()
    _, sessions = open_database(settings)
    with sessions() as session:
        batch_id = resolve_batch(session, batch, "fetching").id
    fetch_batch(settings, sessions, batch_id, output, captions=captions)


def fetch_batch(settings: Settings, sessions, batch_id: str, output: Path, *, captions: bool = True) -> None:
    store = make_store(settings)
    writable_folder(output)
    with sessions() as session:
        lines = manifest_lines(session, store, batch_id)
    done = [line for line in lines if line["object_key"] and line["status"] == "done"]
    names = file_names([line["client_id"] for line in done], [line["object_key"].rsplit(".", 1)[-1] for line in done])
    for line, name in tqdm(list(zip(done, names)), desc="fetch", unit="file", file=sys.stderr, disable=len(done) < 20):
        _write(output / name, store.get(line["object_key"]))
        line["file"] = name
        if captions and line.get("captions"):
            stem = name.rsplit(".", 1)[0]
            for fmt in CAPTION_TYPES:
                suffix = "words.json" if fmt == "json" else fmt
                _write(output / f"{stem}.{suffix}", store.get(caption_key(line["object_key"], fmt)))
    key = manifest_key(batch_id)
    _write(
        output / "manifest.jsonl",
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8"),
    )
    click.echo(
        f"wrote {counted(len(done), 'audio file')} and manifest.jsonl to {output} "
        f"(stored manifest: {(store.url(key) or key) if store.exists(key) else 'not yet written'})",
        err=True,
    )


def writable_folder(output: Path) -> None:
    """The output folder, made; InputError (exit 2) where it cannot be, before anything is fetched."""
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot write to {output}: {e.strerror}") from e


def _write(path: Path, data: bytes) -> None:
    # a full disk or a read-only folder is the user's to mend, said in a line, not a traceback
    try:
        path.write_bytes(data)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}") from e
