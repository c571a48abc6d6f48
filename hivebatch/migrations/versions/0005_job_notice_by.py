"""jobs.notice_by: the job a victim in notice leaves its GPUs for, so the reason it gets once requeued
names that job whether it left early or was requeued at the notice's end

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 18:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("notice_by", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("notice_by")
