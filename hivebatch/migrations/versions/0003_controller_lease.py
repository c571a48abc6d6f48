"""controller_lease: the controller's exclusivity lives in the database, not in a lock file

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "controller_lease",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("token", sa.String(length=64), nullable=False),
        sa.Column("holder_host", sa.String(length=255), nullable=False),
        sa.Column("holder_pid", sa.Integer(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_controller_lease")),
    )


def downgrade() -> None:
    op.drop_table("controller_lease")
