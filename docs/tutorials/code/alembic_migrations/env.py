"""The tutorial's Alembic ``env.py`` (docs/tutorials/alembic.md): the outbox's tables beside yours."""

import os

import psycopg
from alembic import context
from sqlalchemy import create_engine

from outbox_adapters.postgres import metadata as outbox_metadata

# --8<-- [start:env]
# The outbox's tables beside your models': autogenerate writes both. In your project this list
# is [Base.metadata, outbox_metadata]; the tutorial has no models of its own.
target_metadata = [outbox_metadata]

# Any libpq connection string (a URL or "dbname=... host=..."): psycopg connects.
database_url = os.environ["DATABASE_URL"]
engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(database_url))
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
# --8<-- [end:env]
