"""loudness and verdicts: a batch's and a job's loudness target and true-peak ceiling, each job's
measured level, and the verdict of the check of its audio against its text

Revision ID: 0006
Revises: 0005

recreate="never": plain ALTER TABLE on both databases, as 0005 explains (a rebuilt ``batches``
would cascade to every job on SQLite).
"""

from alembic import op
import sqlalchemy as sa


revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("batches", "jobs"):
        with op.batch_alter_table(table, recreate="never") as t:
            t.add_column(sa.Column("loudness_target", sa.Float(), nullable=True))
            t.add_column(sa.Column("true_peak_max", sa.Float(), nullable=True))
    with op.batch_alter_table("job_metrics", recreate="never") as t:
        t.add_column(sa.Column("loudness_lufs", sa.Float(), nullable=True))
        t.add_column(sa.Column("true_peak_dbtp", sa.Float(), nullable=True))
        t.add_column(sa.Column("verdict", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_metrics", recreate="never") as t:
        t.drop_column("verdict")
        t.drop_column("true_peak_dbtp")
        t.drop_column("loudness_lufs")
    for table in ("jobs", "batches"):
        with op.batch_alter_table(table, recreate="never") as t:
            t.drop_column("true_peak_max")
            t.drop_column("loudness_target")
