"""API tokens may expire: a nullable ``expires_at`` on ``api_tokens``.

A token past it is refused like a revoked one (``windpipe/catalog/principals.py``); None
means it never expires (every token minted before this revision). Downgrading
drops the column, which makes every token non-expiring again.

Revision ID: 0005_token_expiry
Revises: 0004_retire
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_token_expiry"
down_revision = "0004_retire"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("expires_at")
