"""Alembic migrations. Run them with `synth db upgrade`."""
