"""Plans are stored as one artifact each; the unread plan_streams and plan_units go.

A plan's streams, piece layout and (for epoch-independent strategies) schedule are
now one Arrow IPC artifact in ``plan_artifacts`` (``windpipe.services.planning.artifact``), read by
every consumer. Plans are derived data with content ids: upgrading deletes the
plans made by an older catalog (they lack an artifact), and posting the same config
to the same split again recreates each under the same id. Downgrading deletes the
artifacts' plans likewise and restores the old, empty tables.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(sa.text("DELETE FROM plan_units"))
    op.execute(sa.text("DELETE FROM plan_streams"))
    op.execute(sa.text("DELETE FROM plans"))
    op.drop_table("plan_units")
    op.drop_table("plan_streams")
    op.create_table(
        "plan_artifacts",
        sa.Column("plan_id", sa.String(80), nullable=False),
        sa.Column("format", sa.Integer(), nullable=False),
        sa.Column("n_bytes", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["plans.id"], name="fk_plan_artifacts_plan_id_plans",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("plan_id", name="pk_plan_artifacts"),
    )


def downgrade() -> None:
    op.drop_table("plan_artifacts")
    op.execute(sa.text("DELETE FROM plans"))
    op.create_table(
        "plan_streams",
        sa.Column("plan_id", sa.String(80), nullable=False),
        sa.Column("stream_idx", sa.BigInteger(), nullable=False),
        sa.Column("protocol", sa.String(100), nullable=False),
        sa.Column("group_key", sa.JSON(), nullable=False),
        sa.Column("alignment_key", sa.JSON(), nullable=False),
        sa.Column("n_rows", sa.BigInteger(), nullable=False),
        sa.Column("manifest_row_ids", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["plans.id"], name="fk_plan_streams_plan_id_plans", ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("plan_id", "stream_idx", name="pk_plan_streams"),
    )
    op.create_table(
        "plan_units",
        sa.Column("plan_id", sa.String(80), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("unit_idx", sa.BigInteger(), nullable=False),
        sa.Column("protocol", sa.String(100), nullable=False),
        sa.Column("n_batches", sa.Integer(), nullable=False),
        sa.Column("n_lanes", sa.Integer(), nullable=False),
        sa.Column("batch_start", sa.BigInteger(), nullable=False),
        sa.Column("stream_idx", sa.BigInteger(), nullable=False),
        sa.Column("window_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("plan_id", "epoch", "unit_idx", name="pk_plan_units"),
    )
