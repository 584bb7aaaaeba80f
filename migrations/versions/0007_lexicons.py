"""lexicons: pronunciation lexicons and their versions, and the lexicon version a batch and each of
its jobs render with

Revision ID: 0007
Revises: 0006

recreate="never": plain ALTER TABLE on both databases, as 0005 explains.
"""

from alembic import op
import sqlalchemy as sa


revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lexicons",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("owner", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("entry_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lexicons")),
        sa.UniqueConstraint("owner", "name", name="uq_lexicons_owner_name"),
    )
    op.create_index(op.f("ix_lexicons_owner"), "lexicons", ["owner"], unique=False)
    op.create_table(
        "lexicon_versions",
        sa.Column("lexicon_id", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("entries", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["lexicon_id"], ["lexicons.id"], ondelete="CASCADE", name=op.f("fk_lexicon_versions_lexicon_id_lexicons")
        ),
        sa.PrimaryKeyConstraint("lexicon_id", "version", name=op.f("pk_lexicon_versions")),
    )
    for table in ("batches", "jobs"):
        with op.batch_alter_table(table, recreate="never") as t:
            t.add_column(sa.Column("lexicon_id", sa.String(length=32), nullable=True))
            t.add_column(sa.Column("lexicon_version", sa.Integer(), nullable=True))


def downgrade() -> None:
    for table in ("jobs", "batches"):
        with op.batch_alter_table(table, recreate="never") as t:
            t.drop_column("lexicon_version")
            t.drop_column("lexicon_id")
    op.drop_index(op.f("ix_lexicons_owner"), table_name="lexicons")
    op.drop_table("lexicon_versions")
    op.drop_table("lexicons")
