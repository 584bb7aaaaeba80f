"""The migrations build the schema the models describe (SQLite and PostgreSQL), and a rename keeps
what the renamed columns held, both ways."""

from __future__ import annotations

from datetime import UTC, datetime

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, Table, insert, select

from pipeline.db import migrate
from pipeline.db.models import Base
from pipeline.db.session import make_engine


def test_the_migrated_schema_is_the_one_the_models_describe(database_url):
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            differences = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()
    assert differences == []


def _tables(conn) -> tuple[Table, Table]:
    meta = MetaData()
    return Table("batches", meta, autoload_with=conn), Table("jobs", meta, autoload_with=conn)


def test_the_webhook_columns_keep_their_values_through_the_rename_and_back(database_url):
    engine = make_engine(database_url)
    config = migrate.alembic_config(engine)
    now = datetime.now(UTC)
    try:
        command.downgrade(config, "0004")  # the columns under the names migration 0002 gave them
        with engine.begin() as conn:
            batches, jobs = _tables(conn)
            conn.execute(
                insert(batches).values(
                    id="b1",
                    voice="v",
                    format="wav",
                    priority="batch",
                    total_jobs=1,
                    skipped_lines=0,
                    created_at=now,
                    kind="batch",
                    callback_url="https://example.com/b",
                    callback_events=["batch.finished"],
                )
            )
            conn.execute(
                insert(jobs).values(
                    id="j1",
                    batch_id="b1",
                    client_id="c",
                    text="Hi.",
                    voice="v",
                    format="wav",
                    priority="batch",
                    status="pending",
                    attempts=0,
                    created_at=now,
                    updated_at=now,
                    callback_url="https://example.com/j",
                    callback_events=["job.finished"],
                )
            )

        migrate.upgrade(engine)
        with engine.connect() as conn:
            batches, jobs = _tables(conn)
            assert conn.execute(select(batches.c.webhook_url, batches.c.webhook_events)).one() == (
                "https://example.com/b",
                ["batch.finished"],
            )
            assert conn.execute(select(jobs.c.webhook_url, jobs.c.webhook_events)).one() == (
                "https://example.com/j",
                ["job.finished"],
            )
            assert "callback_url" not in batches.c and "callback_url" not in jobs.c

        command.downgrade(config, "0004")
        with engine.connect() as conn:
            batches, _ = _tables(conn)
            assert conn.execute(select(batches.c.callback_url)).scalar_one() == "https://example.com/b"
    finally:
        engine.dispose()
