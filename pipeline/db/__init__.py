"""SQL storage of batches, jobs and their metrics (SQLAlchemy 2; SQLite and PostgreSQL)."""
