"""callback_url/callback_events become webhook_url/webhook_events

Revision ID: 0005
Revises: 0004

The product calls them webhooks everywhere else (API fields, settings, routes, tables). A rename,
not a copy: processes of the previous release read the old names, so stop them before
`synth db upgrade`.

recreate="never": ALTER TABLE ... RENAME COLUMN on both databases (SQLite has it since 3.25).
Batch mode's default on SQLite rebuilds the table instead, and dropping the old ``batches`` with
foreign keys on (pipeline/db/session.py turns them on) would cascade to every job.
"""

from alembic import op


revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_RENAMES = (("callback_url", "webhook_url"), ("callback_events", "webhook_events"))


def upgrade() -> None:
    for table in ("batches", "jobs"):
        with op.batch_alter_table(table, schema=None, recreate="never") as batch_op:
            for old, new in _RENAMES:
                batch_op.alter_column(old, new_column_name=new)


def downgrade() -> None:
    for table in ("jobs", "batches"):
        with op.batch_alter_table(table, schema=None, recreate="never") as batch_op:
            for old, new in _RENAMES:
                batch_op.alter_column(new, new_column_name=old)
