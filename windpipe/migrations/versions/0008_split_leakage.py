"""The cells a split puts on both sides: ``splits.leakage``.

``splits.leakage`` (nullable JSON) holds how many cells (``(set_id, cell_id)``) have rows
in both ``train`` and ``val``, and a few of them, counted once when the split is made
(``windpipe.catalog.splits.cell_leakage``). Splits stored before this revision keep null: their
answer says ``leakage: null`` (unknown), and their ids, assignments and plans are
unchanged. Downgrading drops the column: it is derived from the stored assignments.

Revision ID: 0008_split_leakage
Revises: 0007_registration_jobs
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_split_leakage"
down_revision = "0007_registration_jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("splits") as batch:
        batch.add_column(sa.Column("leakage", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("splits") as batch:
        batch.drop_column("leakage")
