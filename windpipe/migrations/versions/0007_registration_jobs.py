"""Registration jobs: a registration that outlasts its request (``windpipe/catalog/jobs.py``).

One row per job: its dataset, the digest of its request (a repeated request finds the
running job), who started it, its state and progress (``updated_at`` is the running
job's heartbeat) with its phase, and its outcome (the registered version's answer, or the error
envelope). Downgrading drops the table: jobs are a record of work, not data.

Revision ID: 0007_registration_jobs
Revises: 0006_split_stats
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_registration_jobs"
down_revision = "0006_split_stats"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registration_jobs",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("dataset", sa.String(200), nullable=False),
        sa.Column("request_key", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("phase", sa.String(20), nullable=False),
        sa.Column("checked", sa.BigInteger(), nullable=False),
        sa.Column("profiled", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=True),
        sa.Column("created", sa.Boolean(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_registration_jobs"),
    )
    op.create_index("ix_registration_jobs_dataset", "registration_jobs", ["dataset"])
    op.create_index("ix_registration_jobs_request_key", "registration_jobs", ["request_key"])


def downgrade() -> None:
    op.drop_index("ix_registration_jobs_request_key", table_name="registration_jobs")
    op.drop_index("ix_registration_jobs_dataset", table_name="registration_jobs")
    op.drop_table("registration_jobs")
