"""key quotas, usage and the console's indexes: optional per-day limits and a live-stream cap on
each API key, a per-key, per-day usage table, and the indexes the operator's console reads the
last day and the open batches through

Revision ID: 0008
Revises: 0007

recreate="never": plain ALTER TABLE on both databases, as 0005 explains.
"""

from alembic import op
import sqlalchemy as sa


revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys", recreate="never") as t:
        t.add_column(sa.Column("chars_per_day", sa.BigInteger(), nullable=True))
        t.add_column(sa.Column("audio_s_per_day", sa.Float(), nullable=True))
        t.add_column(sa.Column("live_streams", sa.Integer(), nullable=True))
    op.create_table(
        "key_usage",
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("chars", sa.BigInteger(), nullable=False),
        sa.Column("audio_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name=op.f("fk_key_usage_key_id_api_keys"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("key_id", "day", name=op.f("pk_key_usage")),
    )
    op.create_index("ix_jobs_status_finished_at", "jobs", ["status", "finished_at"])
    op.create_index(op.f("ix_batches_finished_at"), "batches", ["finished_at"])
    op.create_index(op.f("ix_job_metrics_recorded_at"), "job_metrics", ["recorded_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_job_metrics_recorded_at"), table_name="job_metrics")
    op.drop_index(op.f("ix_batches_finished_at"), table_name="batches")
    op.drop_index("ix_jobs_status_finished_at", table_name="jobs")
    op.drop_table("key_usage")
    with op.batch_alter_table("api_keys", recreate="never") as t:
        t.drop_column("live_streams")
        t.drop_column("audio_s_per_day")
        t.drop_column("chars_per_day")
