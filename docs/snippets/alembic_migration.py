"""Add the proletarian-di queue tables.

Revision ID: 0001_proletarian
"""

from alembic import op

from proletarian_di.schema import schema_sql, statements

revision = "0001_proletarian"
down_revision = None


def upgrade() -> None:
    for statement in statements(schema_sql("postgresql")):
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS proletarian.archived_job")
    op.execute("DROP TABLE IF EXISTS proletarian.job")
