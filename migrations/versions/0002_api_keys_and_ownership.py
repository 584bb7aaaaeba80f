"""API keys, job ownership, callbacks, idempotency, expiry

Revision ID: 0002
Revises: 0001

job_status is a non-native enum (a VARCHAR(16) on both databases) that already lists 'cancelled',
so cancellation needs no ALTER TYPE.
"""

from alembic import op
import sqlalchemy as sa


revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_ts = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("prefix", sa.String(length=32), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", _ts, nullable=False),
        sa.Column("revoked_at", _ts, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("resource_type", sa.String(length=16), nullable=False),
        sa.Column("resource_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", _ts, nullable=False),
        sa.ForeignKeyConstraint(
            ["key_id"], ["api_keys.id"], name=op.f("fk_idempotency_keys_key_id_api_keys"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_idempotency_keys")),
        sa.UniqueConstraint("key_id", "idempotency_key", name="uq_idempotency_keys_key_idem"),
    )
    with op.batch_alter_table("batches", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_key_id", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("kind", sa.String(length=16), server_default="batch", nullable=False))
        batch_op.add_column(sa.Column("callback_url", sa.String(length=2000), nullable=True))
        batch_op.add_column(sa.Column("callback_events", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("expires_at", _ts, nullable=True))
        batch_op.add_column(sa.Column("cancelled_at", _ts, nullable=True))
        batch_op.create_foreign_key(
            op.f("fk_batches_owner_key_id_api_keys"), "api_keys", ["owner_key_id"], ["id"], ondelete="SET NULL"
        )
        batch_op.create_index(op.f("ix_batches_owner_key_id"), ["owner_key_id"], unique=False)
        batch_op.create_index(op.f("ix_batches_expires_at"), ["expires_at"], unique=False)
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("callback_url", sa.String(length=2000), nullable=True))
        batch_op.add_column(sa.Column("callback_events", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("callback_events")
        batch_op.drop_column("callback_url")
    with op.batch_alter_table("batches", schema=None) as batch_op:
        batch_op.drop_index(op.f("ix_batches_expires_at"))
        batch_op.drop_index(op.f("ix_batches_owner_key_id"))
        batch_op.drop_constraint(op.f("fk_batches_owner_key_id_api_keys"), type_="foreignkey")
        batch_op.drop_column("cancelled_at")
        batch_op.drop_column("expires_at")
        batch_op.drop_column("callback_events")
        batch_op.drop_column("callback_url")
        batch_op.drop_column("kind")
        batch_op.drop_column("owner_key_id")
    op.drop_table("idempotency_keys")
    op.drop_table("api_keys")
