"""`synth db ...`"""

from __future__ import annotations

import click

from pipeline.db import migrate
from pipeline.db.session import check_reachable, make_engine
from pipeline.settings import Settings


@click.group()
def db() -> None:
    """Database schema management."""


@db.command()
@click.option(
    "--revision", default="head", show_default=True, help="The migration to bring the schema to (head: the newest)."
)
def upgrade(revision: str) -> None:
    """Apply migrations to SYNTH_DATABASE_URL (or the embedded SQLite file)."""
    settings = Settings()
    engine = make_engine(settings.sqlalchemy_url)
    check_reachable(engine)
    migrate.upgrade(engine, revision)
    click.echo(f"database {engine.url.render_as_string(hide_password=True)} is at {revision}")
