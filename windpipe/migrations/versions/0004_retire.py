"""Versions, splits and plans can be retired: a nullable ``retired_at`` on each.

Retiring is soft (``windpipe/catalog/retire.py``): the row stays, listings hide it, new
splits and plans on it are refused and its plans' Flight tickets too. Downgrading
drops the column, which un-retires everything.

Revision ID: 0004_retire
Revises: 0003_principals
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_retire"
down_revision = "0003_principals"
branch_labels = None
depends_on = None

_TABLES = ("versions", "splits", "plans")


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for table in reversed(_TABLES):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("retired_at")
