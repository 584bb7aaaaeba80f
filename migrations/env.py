from alembic import context
from sqlalchemy import create_engine

from pipeline.db.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    engine = config.attributes.get("engine")
    if engine is None:  # plain `alembic` CLI: take the URL from the ini or SYNTH_DATABASE_URL
        from pipeline.settings import Settings

        engine = create_engine(config.get_main_option("sqlalchemy.url") or Settings().sqlalchemy_url)
    with engine.begin() as connection:
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=connection.dialect.name == "sqlite"
        )
        context.run_migrations()


run_migrations_online()
