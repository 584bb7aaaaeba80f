"""`synth keys create|list|revoke`: API keys."""

from __future__ import annotations

import json

import click

from cli.context import open_database, open_store
from pipeline import api_keys, lifecycle
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
    """List keys (id, name, prefix, created, revoked)."""
    _, sessions = open_database(Settings())
    with sessions() as session:
        rows = api_keys.list_keys(session)
    for k in rows:
        revoked = as_utc(k.revoked_at).isoformat() if k.revoked_at else None
        created = as_utc(k.created_at).isoformat()
        if as_json:
            click.echo(json.dumps({"id": k.id, "name": k.name, "prefix": k.prefix, "created_at": created,
                                   "revoked_at": revoked}))
        else:
            click.echo(f"{k.id}  {k.prefix}…  {created[:19]}  {'revoked ' + revoked[:19] if revoked else 'active'}"
                       f"  {k.name}")


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
        session.commit()   # revoked first: nothing below may keep the key alive
    click.echo(f"key {key_id} revoked", err=True)
    try:
        with sessions() as session:
            cancelled = lifecycle.cancel_owned(session, open_store(settings), key_id)
            session.commit()
    except (ServiceUnavailableError, StorageError) as e:
        raise ServiceUnavailableError(f"key {key_id} is revoked, but its queued jobs could not be cancelled "
                                      f"({e}); workers cancel them as they reach them") from e
    click.echo(f"{counted(cancelled, 'queued job')} cancelled", err=True)
