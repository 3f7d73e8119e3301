"""Statistics of a split's sides, and the profile a version is registered with.

``split_stats`` holds one row per split, side (``train``/``val``) and set of columns
(``columns_key``): the statistics ``POST /v1/splits/{id}/stats`` computed once
(``windpipe/catalog/stats.py``), as JSON. ``versions.profile`` (nullable) holds what registration
learned about the values (null and non-finite counts, irregular sampling;
``windpipe/catalog/profile.py``); versions registered before this revision have none.
Downgrading drops both: statistics are derived data and are computed again on request.

Revision ID: 0006_split_stats
Revises: 0005_token_expiry
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_split_stats"
down_revision = "0005_token_expiry"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "split_stats",
        sa.Column("split_id", sa.String(80), nullable=False),
        sa.Column("side", sa.String(20), nullable=False),
        sa.Column("columns_key", sa.String(64), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["split_id"], ["splits.id"], name="fk_split_stats_split_id_splits",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("split_id", "side", "columns_key", name="pk_split_stats"),
    )
    with op.batch_alter_table("versions") as batch:
        batch.add_column(sa.Column("profile", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("versions") as batch:
        batch.drop_column("profile")
    op.drop_table("split_stats")
