"""Add the queue tables: step 1 of proletarian-di's schema, Proletarian's own tables.

Revision ID: 0001_proletarian
"""

from alembic import op

from proletarian_di.schema import migration, statements

revision = "0001_proletarian"
down_revision = None


def upgrade() -> None:
    for statement in statements(migration("postgresql", 1).sql()):
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS proletarian.archived_job")
    op.execute("DROP TABLE IF EXISTS proletarian.job")
