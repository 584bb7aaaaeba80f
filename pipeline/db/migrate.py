"""Alembic driven from code, so `synth db upgrade` needs no alembic.ini in the working directory.

Checking that a database is current imports no alembic: every command checks it at start, and
loading alembic and its scripts cost more than the rest of a `synth submit`. The head is the
highest file prefix in migrations/versions, whose revision ids are those prefixes and whose chain
is linear (tests/test_migrations_layout.py keeps both true).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

import migrations
from pipeline.errors import InputError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(migrations.__file__).parent
VERSION_TABLE = "alembic_version"


def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command
    from alembic.util import CommandError

    try:
        command.upgrade(alembic_config(engine), revision)
    except CommandError as e:  # alembic's word for a revision it cannot find, or a downgrade asked of upgrade
        raise InputError(
            f"cannot upgrade to revision {revision!r}: {e}; the revisions are the file prefixes "
            f"in migrations/versions (the newest: {head_revision()}), or head"
        ) from e


def head_revision() -> str:
    return max(p.name.split("_", 1)[0] for p in (MIGRATIONS_DIR / "versions").glob("[0-9]*_*.py"))


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        if not inspect(conn).has_table(VERSION_TABLE):
            return None
        return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def is_current(engine: Engine) -> bool:
    return current_revision(engine) == head_revision()
