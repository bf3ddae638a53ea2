"""KV states know which of their tokens are the prompt, and their size

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 13:50:00

A saved state holds the prompt and the reply that followed; resuming after a rollback sends the
prompt again and needs its length to do so. ``state_bytes`` lets the history show a state's size
without decompressing it. Rows from 0001 get 0 for both: such a state is shown but not resumed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kv_states", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("prompt_tokens", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("state_bytes", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("kv_states", schema=None) as batch_op:
        batch_op.drop_column("state_bytes")
        batch_op.drop_column("prompt_tokens")
