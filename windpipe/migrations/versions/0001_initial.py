"""Initial catalog schema: datasets, versions, manifest rows, segments, splits, plans.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_datasets"),
        sa.UniqueConstraint("name", name="uq_datasets_name"),
    )
    op.create_table(
        "versions",
        sa.Column("id", sa.String(80), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("root_uri", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("n_manifest_rows", sa.BigInteger(), nullable=False),
        sa.Column("n_segments", sa.BigInteger(), nullable=False),
        sa.Column("n_rows", sa.BigInteger(), nullable=False),
        sa.Column("schema", sa.JSON(), nullable=False),
        sa.Column("metadata_columns", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name="fk_versions_dataset_id_datasets",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_versions"),
        sa.UniqueConstraint("seq", name="uq_versions_seq"),
    )
    op.create_index("ix_versions_dataset_id", "versions", ["dataset_id"])
    op.create_table(
        "manifest_rows",
        sa.Column("version_id", sa.String(80), nullable=False),
        sa.Column("manifest_row_id", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("set_id", sa.Text(), nullable=False),
        sa.Column("cell_id", sa.Text(), nullable=False),
        sa.Column("cidx", sa.BigInteger(), nullable=False),
        sa.Column("protocol", sa.String(100), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("row_count", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["version_id"], ["versions.id"], name="fk_manifest_rows_version_id_versions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("version_id", "manifest_row_id", name="pk_manifest_rows"),
    )
    op.create_table(
        "segments",
        sa.Column("version_id", sa.String(80), nullable=False),
        sa.Column("manifest_row_id", sa.BigInteger(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("format", sa.String(20), nullable=False),
        sa.Column("row_count", sa.BigInteger(), nullable=False),
        sa.Column("chunk_rows", sa.JSON(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["version_id", "manifest_row_id"],
            ["manifest_rows.version_id", "manifest_rows.manifest_row_id"],
            name="fk_segments_version_id_manifest_rows",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("version_id", "manifest_row_id", "ordinal", name="pk_segments"),
    )
    op.create_table(
        "splits",
        sa.Column("id", sa.String(80), nullable=False),
        sa.Column("version_id", sa.String(80), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["version_id"], ["versions.id"], name="fk_splits_version_id_versions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_splits"),
    )
    op.create_index("ix_splits_version_id", "splits", ["version_id"])
    op.create_table(
        "split_assignments",
        sa.Column("split_id", sa.String(80), nullable=False),
        sa.Column("manifest_row_id", sa.BigInteger(), nullable=False),
        sa.Column("split", sa.String(20), nullable=False),
        sa.ForeignKeyConstraint(
            ["split_id"], ["splits.id"], name="fk_split_assignments_split_id_splits",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("split_id", "manifest_row_id", name="pk_split_assignments"),
    )
    op.create_table(
        "plans",
        sa.Column("id", sa.String(80), nullable=False),
        sa.Column("split_id", sa.String(80), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("n_streams", sa.BigInteger(), nullable=False),
        sa.Column("n_units", sa.BigInteger(), nullable=False),
        sa.Column("n_batches", sa.BigInteger(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["split_id"], ["splits.id"], name="fk_plans_split_id_splits", ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_plans"),
    )
    op.create_index("ix_plans_split_id", "plans", ["split_id"])
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


def downgrade() -> None:
    op.drop_table("plan_units")
    op.drop_table("plan_streams")
    op.drop_index("ix_plans_split_id", table_name="plans")
    op.drop_table("plans")
    op.drop_table("split_assignments")
    op.drop_index("ix_splits_version_id", table_name="splits")
    op.drop_table("splits")
    op.drop_table("segments")
    op.drop_table("manifest_rows")
    op.drop_index("ix_versions_dataset_id", table_name="versions")
    op.drop_table("versions")
    op.drop_table("datasets")
