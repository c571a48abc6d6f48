"""jobs.name as text of any length: Slurm accepts a job name of a thousand characters, which did not fit
VARCHAR(256) on PostgreSQL, and the cycle that met such a job failed for every job

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 14:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column("name", existing_type=sa.String(length=256), type_=sa.Text())


def downgrade() -> None:
    # names over 256 characters keep their first 256, as VARCHAR(256) cannot hold more
    op.execute(sa.text("UPDATE jobs SET name = substr(name, 1, 256) WHERE length(name) > 256"))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column("name", existing_type=sa.Text(), type_=sa.String(length=256))
