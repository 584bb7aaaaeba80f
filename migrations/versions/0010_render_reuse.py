"""render reuse: each rendered job's content identity (engine, model, voice, the text after the
front end, format settings, seed) within its scope (its API key, by default), so that a job with
the same identity reuses the stored audio; and the engine seconds a reused job did not spend

Revision ID: 0010
Revises: 0009

recreate="never": plain ALTER TABLE on both databases, as 0005 explains.
"""

from alembic import op
import sqlalchemy as sa


revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "stored_renders",
        sa.Column("scope", sa.String(length=32), nullable=False),
        sa.Column("identity", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("object_key", sa.String(length=500), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "identity"),
    )
    op.create_index("ix_stored_renders_job_id", "stored_renders", ["job_id"])
    with op.batch_alter_table("job_metrics", recreate="never") as t:
        t.add_column(sa.Column("reused_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_metrics", recreate="never") as t:
        t.drop_column("reused_s")
    op.drop_index("ix_stored_renders_job_id", table_name="stored_renders")
    op.drop_table("stored_renders")
