"""`synth keys create|list|quota|revoke`: API keys and their quotas."""

from __future__ import annotations

import json

import click

from cli.context import open_database, open_store
from pipeline import api_keys, lifecycle, usage
from pipeline.db.models import as_utc
from pipeline.errors import InputError, ServiceUnavailableError, StorageError
from pipeline.plural import counted
from pipeline.settings import Settings


@click.group()
def keys() -> None:
    """API keys for `synth api` (Authorization: Bearer sk_synth_...)."""


@keys.command()
@click.option("--name", required=True, help="Who or what uses the key.")
def create(name: str) -> None:
    """Create a key and print it. It is shown this once: only its hash is stored."""
    _, sessions = open_database(Settings())
    with sessions() as session:
        new = api_keys.create_key(session, name=name)
        session.commit()
    click.echo(f"key {new.key.id} ({name}) created; store it now, it is not shown again:", err=True)
    click.echo(new.plaintext)


@keys.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per key.")
def list_(as_json: bool) -> None:
    """List keys: id, prefix, created or revoked, name; then each active key's quotas beside what it
    used today (UTC), "-" for no limit."""
    _, sessions = open_database(Settings())
    with sessions() as session:
        rows = usage.summaries(session, api_keys.list_keys(session))
    for row in rows:
        k = row.key
        revoked = as_utc(k.revoked_at).isoformat() if k.revoked_at else None
        created = as_utc(k.created_at).isoformat()
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "id": k.id,
                        "name": k.name,
                        "prefix": k.prefix,
                        "created_at": created,
                        "revoked_at": revoked,
                        "quotas": {q: getattr(k, q) for q in usage.QUOTAS},
                        "today": row.today.as_dict(),
                    }
                )
            )
            continue
        click.echo(
            f"{k.id}  {k.prefix}…  {created[:19]}  {'revoked ' + revoked[:19] if revoked else 'active'}  {k.name}"
        )
        if not revoked:
            click.echo(
                f"    today: {row.today.chars:,} / {limit_text(k.chars_per_day)} chars, "
                f"{row.today.audio_s:,.1f} / {limit_text(k.audio_s_per_day)} audio s; "
                f"live streams {limit_text(k.live_streams)}"
            )


def limit_text(value: float | None) -> str:
    return "-" if value is None else f"{value:,g}"


class QuotaValue(click.ParamType):
    """A number of 0 or more, or "none" to remove the limit."""

    name = "N|none"

    def __init__(self, kind: type) -> None:
        self.kind = kind

    def convert(self, value, param, ctx):
        if value is NO_LIMIT:
            return value
        if isinstance(value, str) and value.strip().lower() == "none":
            return NO_LIMIT
        try:
            number = self.kind(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a {'whole ' if self.kind is int else ''}number or none", param, ctx)
        if number < 0:
            self.fail(f"{value} is negative: give 0 or more, or none", param, ctx)
        return number


NO_LIMIT = object()  # "none" given: the option's None means it was not given


@keys.command()
@click.argument("key_name")
@click.option(
    "--chars-per-day",
    type=QuotaValue(int),
    default=None,
    help="Characters per UTC day, done and unfinished jobs together (none: no limit).",
)
@click.option(
    "--audio-seconds-per-day",
    "audio_s_per_day",
    type=QuotaValue(float),
    default=None,
    help="Seconds of audio rendered per UTC day; past it, new work is refused (none: no limit).",
)
@click.option(
    "--live-streams",
    type=QuotaValue(int),
    default=None,
    help="Live streams open at once per API process, under SYNTH_API_MAX_LIVE_STREAMS_PER_KEY "
    "(none: that setting alone).",
)
def quota(key_name: str, **limits) -> None:
    """Set or remove a key's quotas (KEY_NAME: its name, or its id). Past one, the key's requests
    to create work answer 429 with Retry-After; nothing queued is cancelled."""
    changes = {name: None if value is NO_LIMIT else value for name, value in limits.items() if value is not None}
    if not changes:
        raise InputError("give at least one of --chars-per-day, --audio-seconds-per-day, --live-streams")
    _, sessions = open_database(Settings())
    with sessions() as session:
        key = api_keys.find_key(session, key_name)
        usage.set_quotas(session, key.id, changes)
        session.commit()
        session.refresh(key)
        click.echo(
            f"key {key.id} ({key.name}): "
            + ", ".join(f"{q.replace('_', ' ')} {limit_text(getattr(key, q))}" for q in usage.QUOTAS),
            err=True,
        )


@keys.command()
@click.argument("key_id")
def revoke(key_id: str) -> None:
    """Revoke a key by id: its requests get 401 from now on, its queued jobs are cancelled, its
    open live streams end within seconds, and no webhook is sent for it any more."""
    settings = Settings()
    _, sessions = open_database(settings)
    with sessions() as session:
        if not api_keys.revoke_key(session, key_id):
            raise InputError(f"no active key with id {key_id!r} (see `synth keys list`)")
        session.commit()  # revoked first: nothing below may keep the key alive
    click.echo(f"key {key_id} revoked", err=True)
    try:
        with sessions() as session:
            cancelled = lifecycle.cancel_owned(session, open_store(settings), key_id)
            session.commit()
    except (ServiceUnavailableError, StorageError) as e:
        raise ServiceUnavailableError(
            f"key {key_id} is revoked, but its queued jobs could not be cancelled "
            f"({e}); workers cancel them as they reach them"
        ) from e
    click.echo(f"{counted(cancelled, 'queued job')} cancelled", err=True)
