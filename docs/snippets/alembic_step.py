"""proletarian-di schema, step 2 on PostgreSQL: stored errors.

Revision ID: 0002_proletarian_errors
"""

from alembic import op

from proletarian_di.schema import migration, statements

revision = "0002_proletarian_errors"
down_revision = "0001_proletarian"


def upgrade() -> None:
    for statement in statements(migration("postgresql", 2).sql()):
        op.execute(statement)


def downgrade() -> None:
    op.execute("ALTER TABLE proletarian.archived_job DROP COLUMN last_error")
    op.execute("ALTER TABLE proletarian.job DROP COLUMN last_error")
