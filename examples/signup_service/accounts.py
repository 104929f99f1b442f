"""The service's own tables and the transactions that write them.

A signup is ONE transaction: the tenant, its admin user and the ``tenant.provisioned`` event in the
library's event outbox (:func:`outbox_adapters.postgres.events.publish_async`). They commit
together or not at all, and nothing in it talks to the broker or to SMTP, so neither can fail or
slow it.

Double opt-in: an admin's address is unconfirmed until the link in the welcome e-mail is used.
:func:`mail_admin` is the one way the service e-mails an admin, and it refuses an unconfirmed
address (:class:`NotConfirmed`) inside the caller's transaction: nothing but the welcome reaches an
address before its owner said it is theirs. Confirming enqueues the first such e-mail, in the same
transaction that records the confirmation.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

import attrs
import psycopg
from psycopg_pool import AsyncConnectionPool

from examples.signup_service.forms import SignupForm
from outbox_adapters.lanes.email import email_message
from outbox_adapters.lanes.email_channel import EMAIL_CHANNEL_LANE
from outbox_adapters.postgres import enqueue_async
from outbox_adapters.postgres.events import publish_async

__all__ = [
    "TABLES",
    "Admin",
    "Confirmed",
    "NotConfirmed",
    "Signup",
    "SlugTaken",
    "admin_of",
    "confirm",
    "create_tables",
    "mail_admin",
    "signup",
]

TABLES: Final = """
CREATE TABLE IF NOT EXISTS signup_tenant (
    id text PRIMARY KEY,
    name text NOT NULL,
    slug text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS signup_user (
    id text PRIMARY KEY,
    tenant_id text NOT NULL REFERENCES signup_tenant (id),
    email text NOT NULL,
    display_name text NOT NULL,
    role text NOT NULL CHECK (role IN ('admin', 'member')),
    confirmed_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, email)
);
"""


class SlugTaken(Exception):
    """Another tenant has this company's slug."""


class NotConfirmed(Exception):
    """The admin has not confirmed the address yet; nothing but the welcome may be sent to it."""


@attrs.frozen
class Signup:
    tenant_id: str
    user_id: str
    event_id: str


@attrs.frozen
class Admin:
    user_id: str
    tenant_id: str
    tenant_name: str
    email: str
    display_name: str
    confirmed: bool


@attrs.frozen
class Confirmed:
    admin: Admin
    #: False when the address was already confirmed (a second click on the link).
    first_time: bool


async def create_tables(pool: AsyncConnectionPool[Any]) -> None:
    async with pool.connection() as conn:
        await conn.execute(TABLES)


async def signup(pool: AsyncConnectionPool[Any], form: SignupForm, *, topic: str) -> Signup:
    """Tenant, admin and event in one transaction; :class:`SlugTaken` when the slug is in use."""
    tenant_id, user_id = str(uuid.uuid4()), str(uuid.uuid4())
    async with pool.connection() as conn:
        try:
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO signup_tenant (id, name, slug) VALUES (%s, %s, %s)",
                    (tenant_id, form.company, form.slug),
                )
                await conn.execute(
                    "INSERT INTO signup_user (id, tenant_id, email, display_name, role)"
                    " VALUES (%s, %s, %s, %s, 'admin')",
                    (user_id, tenant_id, form.admin_email, form.admin_name),
                )
                made = await publish_async(
                    conn,
                    topic=topic,
                    key=tenant_id,
                    type="tenant.provisioned",
                    source="signup-service",
                    data={
                        "tenant_id": tenant_id,
                        "tenant_name": form.company,
                        "tenant_slug": form.slug,
                        "admin_user_id": user_id,
                        "admin_email": form.admin_email,
                        "admin_display_name": form.admin_name,
                        "signup_source": "web",
                    },
                )
        except psycopg.errors.UniqueViolation as exc:
            raise SlugTaken(form.slug) from exc
    return Signup(tenant_id, user_id, made.event.id)


_ADMIN: Final = """
SELECT u.id, u.tenant_id, t.name, u.email, u.display_name, u.confirmed_at IS NOT NULL
FROM signup_user u JOIN signup_tenant t ON t.id = u.tenant_id
WHERE u.id = %s AND u.role = 'admin'
"""


async def admin_of(
    conn: psycopg.AsyncConnection[Any], user_id: str, *, lock: bool = False
) -> Admin:
    """The admin ``user_id`` (``lock``: FOR UPDATE of the user row); ``LookupError`` if none."""
    cur = await conn.execute(_ADMIN + (" FOR UPDATE OF u" if lock else ""), (user_id,))
    row = await cur.fetchone()
    if row is None:
        raise LookupError(f"no admin {user_id}")
    return Admin(str(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), bool(row[5]))


async def mail_admin(  # noqa: PLR0913 - keyword-only, one argument per part of the message
    conn: psycopg.AsyncConnection[Any],
    user_id: str,
    *,
    subject: str,
    text: str,
    fields: dict[str, str],
    idempotency_key: str,
) -> None:
    """Enqueue an e-mail to an admin in the caller's transaction, if the address is confirmed.

    The user row is locked (FOR SHARE would do; FOR UPDATE keeps it simple) so a confirmation can't
    be undone under us. :class:`NotConfirmed` otherwise: nothing is written.
    """
    admin = await admin_of(conn, user_id, lock=True)
    if not admin.confirmed:
        raise NotConfirmed(user_id)
    await enqueue_async(
        conn,
        email_message(
            to=admin.email,
            subject=subject,
            text=text,
            fields=fields,
            lane=EMAIL_CHANNEL_LANE,
            idempotency_key=idempotency_key,
        ),
    )


async def confirm(pool: AsyncConnectionPool[Any], user_id: str, *, public_url: str) -> Confirmed:
    """Record the confirmation and, the first time, enqueue the first e-mail that needed it."""
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            "UPDATE signup_user SET confirmed_at = now()"
            " WHERE id = %s AND role = 'admin' AND confirmed_at IS NULL",
            (user_id,),
        )
        first_time = cur.rowcount == 1
        admin = await admin_of(conn, user_id)
        if first_time:
            await mail_admin(
                conn,
                user_id,
                subject="$tenant_name is ready for you",
                text=(
                    "Hello $display_name,\n\n"
                    "Thanks for confirming your address. Your dashboard:\n\n"
                    "    $dashboard_url\n"
                ),
                fields={
                    "tenant_name": admin.tenant_name,
                    "display_name": admin.display_name,
                    "dashboard_url": f"{public_url}/tenant",
                },
                idempotency_key=f"confirmed:{user_id}",
            )
    return Confirmed(attrs.evolve(admin, confirmed=True), first_time)
