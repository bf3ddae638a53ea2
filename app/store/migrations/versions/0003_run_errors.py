"""Runs keep why they ended in error

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 19:40:00

A run whose finish reason is ``error`` says why: ``error`` is the engine's failure (a crash of
llama.cpp mid-job, in one sentence; the text generated before it is in ``outputs``), ``refused``
is the plan's refusal (the request does not fit the context). Rows from 0002 have neither.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("error", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("refused", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("refused")
        batch_op.drop_column("error")
