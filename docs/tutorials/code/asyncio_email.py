"""Tutorial: an e-mail from plain asyncio + SQLAlchemy (docs/tutorials/asyncio.md).

The host writes an account and its welcome e-mail in ONE transaction; a worker sends the e-mail
and records it. tests/integration/test_tutorials.py runs this file against a real PostgreSQL and
SMTP server. Run it yourself (the outbox tables are created if missing):

    DATABASE_URL=postgresql://... SMTP_URL=smtp://smtp.example.org:587 \\
        SENDER=noreply@example.org python docs/tutorials/code/asyncio_email.py ann@example.org
"""

from __future__ import annotations

import asyncio
import os
import sys

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from outbox_adapters.clock import SystemClock
from outbox_adapters.lanes.email import EMAIL_LANE, EmailHandler, email_lane, email_message
from outbox_adapters.postgres import PostgresStore, enqueue_async, schema
from outbox_adapters.runtime import Worker, WorkerStats
from outbox_adapters.smtp import SmtpMailer, SmtpSettings

# --8<-- [start:setup]
ACCOUNTS = """
CREATE TABLE IF NOT EXISTS tutorial_account (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL UNIQUE
)
"""


async def set_up(database_url: str) -> AsyncEngine:
    """The outbox's tables (as `outbox schema apply` makes them), the host's own table, and an
    async SQLAlchemy engine on psycopg 3 (any libpq connection string works)."""
    schema.apply(database_url)
    engine = create_async_engine(
        "postgresql+psycopg://",
        async_creator=lambda: psycopg.AsyncConnection.connect(database_url),
    )
    async with engine.begin() as conn:
        await conn.execute(text(ACCOUNTS))
    return engine


# --8<-- [end:setup]


# --8<-- [start:enqueue]
async def sign_up(
    sessions: async_sessionmaker[AsyncSession], address: str, *, lane: str = EMAIL_LANE
) -> int:
    """Create an account and enqueue its welcome e-mail: both commit, or neither does."""
    # Built and validated before the transaction: a bad address raises InvalidRecipient here.
    welcome = email_message(
        to=address,
        subject="Welcome!",
        text="Choose your password: $password_reset_url",
        # A secret link goes in its own field: filled in at send time, scrubbed once sent.
        fields={"password_reset_url": f"https://app.example.org/reset/{address}"},
        idempotency_key=f"welcome/{address}",
        lane=lane,
    )
    async with sessions() as session, session.begin():
        found = await session.execute(
            text("INSERT INTO tutorial_account (email) VALUES (:email) RETURNING id"),
            {"email": address},
        )
        account = int(found.scalar_one())
        await enqueue_async(session, welcome)  # same session, same transaction
    return account


# --8<-- [end:enqueue]


# --8<-- [start:worker]
async def send_welcomes(
    database_url: str, smtp: SmtpSettings, *, lane: str = EMAIL_LANE
) -> WorkerStats:
    """Run an e-mail worker until nothing is due (a service would run it until SIGTERM, with
    ``await worker.run()`` and ``worker.request_stop()``)."""
    async with await PostgresStore.open(database_url) as store, SmtpMailer(smtp) as mailer:
        handler = EmailHandler(mailer, sender=smtp.policy.sender, clock=SystemClock())
        worker = Worker(store, handler, email_lane(lane=lane))
        return await worker.run(drain=True)


# --8<-- [end:worker]


# --8<-- [start:main]
async def main(database_url: str, smtp: SmtpSettings, address: str) -> None:
    engine = await set_up(database_url)
    try:
        account = await sign_up(async_sessionmaker(engine), address)
    finally:
        await engine.dispose()
    stats = await send_welcomes(database_url, smtp)
    print(f"account {account}: {stats.dispatched} e-mail(s) sent")


if __name__ == "__main__":
    settings = SmtpSettings.from_url(
        os.environ["SMTP_URL"], sender=os.environ["SENDER"], ca_file=os.environ.get("SMTP_CA_FILE")
    )
    asyncio.run(main(os.environ["DATABASE_URL"], settings, sys.argv[1]))
# --8<-- [end:main]
