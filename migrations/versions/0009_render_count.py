"""render count: how many renders a job took (a bad verdict is rendered again, SYNTH_RERENDER_BUDGET)

Revision ID: 0009
Revises: 0008

recreate="never": a plain ALTER TABLE on both databases, as 0005 explains.
"""

from alembic import op
import sqlalchemy as sa


revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_metrics", recreate="never") as t:
        t.add_column(sa.Column("renders", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_metrics", recreate="never") as t:
        t.drop_column("renders")
