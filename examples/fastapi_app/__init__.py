"""A FastAPI host: its lifespan runs its outbox's e-mail lane (the application object,
:class:`~outbox_adapters.app.Outbox`), its endpoint enqueues on the request's async
SQLAlchemy session in the same transaction as the host's row, and the in-app feed is mounted behind
the app's own authentication. ``create_app(settings)`` builds it; tests/integration/test_fastapi.py
runs it on a real database and SMTP server.

::

    app = create_app(AppSettings(dsn=..., smtp=..., lane="email"))
    # POST /orders {"customer": "ann@example.org"} -> 201; the confirmation mail goes out
"""

# No `from __future__ import annotations` here: FastAPI reads the endpoints' annotations at run
# time, and the session dependency is local to create_app.

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

import attrs
import psycopg
from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from outbox_adapters.app import EmailLane, Outbox
from outbox_adapters.deadletters import DeadLetters
from outbox_adapters.feed import Feed, Principal
from outbox_adapters.lanes.email import email_message
from outbox_adapters.postgres import enqueue_async
from outbox_adapters.postgres.pools import connection_pool
from outbox_adapters.smtp import SmtpSettings
from outbox_core.errors import InvalidMessage

__all__ = ["AppSettings", "create_app"]

ORDERS = """
CREATE TABLE IF NOT EXISTS fastapi_order (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""


@attrs.frozen
class AppSettings:
    dsn: str
    smtp: SmtpSettings
    lane: str = "email"
    #: The worker's idle poll (a commit on the lane wakes it at once through LISTEN).
    poll_interval: float = 0.2


class Order(BaseModel):
    customer: str


# --8<-- [start:auth]
def _authenticate(connection: Any) -> Principal | None:  # noqa: ANN401 - Starlette's HTTPConnection
    """The example's 'authentication': a header naming the tenant (use your real one)."""
    tenant = connection.headers.get("x-tenant")
    return Principal.tenant_user(tenant) if tenant else None


def _operator(request: Any) -> str | None:  # noqa: ANN401 - Starlette's Request
    """The example's operator check for the dead-letter console (use your real one)."""
    name = request.headers.get("x-operator")
    return name if name == "ops" else None


# --8<-- [end:auth]


# --8<-- [start:create_app]
def create_app(settings: AppSettings) -> FastAPI:
    engine = create_async_engine(
        "postgresql+psycopg://",
        async_creator=lambda: psycopg.AsyncConnection.connect(settings.dsn),
    )
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    feed_box: dict[str, Feed] = {}
    letters_box: dict[str, DeadLetters] = {}

    # --8<-- [end:create_app]
    # --8<-- [start:lifespan]
    # The host's outbox, described once: `outbox --app` can load the same object.
    outbox = Outbox(
        database_url=settings.dsn,
        smtp=settings.smtp,
        poll_interval=settings.poll_interval,
        lanes=[EmailLane(settings.lane)],
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with engine.begin() as conn:
            await conn.execute(text(ORDERS))
        async with (
            connection_pool(settings.dsn, max_size=4) as pool,
            Feed(settings.dsn, _authenticate, pool=pool) as feed,
            outbox.running(settings.lane),  # on leaving: the row in flight finishes, marks recorded
        ):
            feed_box["feed"] = feed
            letters_box["letters"] = DeadLetters(pool, _operator)
            yield
        await engine.dispose()

    # --8<-- [end:lifespan]
    # --8<-- [start:endpoint]
    app = FastAPI(lifespan=lifespan)

    async def session() -> AsyncIterator[AsyncSession]:
        async with sessions() as opened:
            yield opened

    @app.post("/orders", status_code=201)
    async def create_order(
        order: Order, db: Annotated[AsyncSession, Depends(session)]
    ) -> dict[str, int]:
        try:
            message = email_message(
                to=order.customer,
                subject="Order received",
                text="Thanks! Your order $order is in.",
                fields={"order": "pending"},
                lane=settings.lane,
            )
        except InvalidMessage as exc:  # a bad address: refused here, nothing written
            raise HTTPException(status_code=422, detail=str(exc)) from None
        async with db.begin():  # the order and its e-mail: one transaction
            found = await db.execute(
                text("INSERT INTO fastapi_order (customer) VALUES (:c) RETURNING id"),
                {"c": order.customer},
            )
            order_id = int(found.scalar_one())
            await enqueue_async(db, message)
        return {"order": order_id}

    # --8<-- [end:endpoint]

    # --8<-- [start:mounts]
    async def mounted_feed(scope: Any, receive: Any, send: Any) -> None:  # noqa: ANN401
        await feed_box["feed"].app(scope, receive, send)

    async def mounted_letters(scope: Any, receive: Any, send: Any) -> None:  # noqa: ANN401
        await letters_box["letters"].app(scope, receive, send)

    app.mount("/feed", mounted_feed)
    app.mount("/ops/dead-letters", mounted_letters)
    return app
    # --8<-- [end:mounts]
