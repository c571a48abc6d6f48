"""jobs.owner_begin: the start time a job's owner set while it waited for GPUs, so that their hold and
release, which replace Slurm's begin time with the job_submit plugin's marks, do not lose it

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29 11:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_begin", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("owner_begin")
