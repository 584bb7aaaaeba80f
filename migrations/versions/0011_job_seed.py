"""job seed: the seed a job renders with, set where it is rendered again with a new one (a
document's chapter, `synth rerender`); None, as every job before, is the engine's own

Revision ID: 0011
Revises: 0010

recreate="never": a plain ALTER TABLE on both databases, as 0005 explains.
"""

from alembic import op
import sqlalchemy as sa


revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", recreate="never") as t:
        t.add_column(sa.Column("seed", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", recreate="never") as t:
        t.drop_column("seed")
