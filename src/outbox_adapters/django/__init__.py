"""Django integration: enqueue and publish inside ``transaction.atomic()``, and ``manage.py outbox``.

Add ``"outbox_adapters.django"`` to ``INSTALLED_APPS`` (for the management command), use Django's
PostgreSQL backend with psycopg 3, and write messages in the same transaction as your models::

    from django.db import transaction
    from outbox_adapters.django import enqueue
    from outbox_adapters.lanes.email import email_message

    with transaction.atomic():
        invoice = Invoice.objects.create(...)
        enqueue(email_message(to=..., subject=..., text=..., fields={...}))

``enqueue`` and ``publish`` run on Django's own connection (``using``, ``"default"`` unless
named), so the row commits or rolls back with the block. Outside ``atomic()`` they raise
:class:`~outbox_adapters.postgres.TransactionRequired`: a Django connection in autocommit mode
would commit the row on its own, which is the dual write the outbox exists to prevent.

``python manage.py outbox <command> ...`` runs any ``outbox`` command (``worker``, ``relay``,
``consume``, ``healthcheck``, ``prune``, ...) against the database Django is configured with.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import pq

from outbox_adapters.postgres import TransactionRequired
from outbox_adapters.postgres import enqueue as _enqueue
from outbox_adapters.postgres.events import Published
from outbox_adapters.postgres.events import publish as _publish
from outbox_core.messages import NewMessage
from outbox_core.ports import EnqueueResult

__all__ = ["database_url", "enqueue", "publish"]


def _connection(using: str) -> psycopg.Connection[Any]:
    """Django's psycopg connection for ``using``, inside the open ``atomic()`` block."""
    from django.db import connections  # noqa: PLC0415 - Django is the host's, imported late

    connection = connections[using]
    if connection.vendor != "postgresql":
        raise TransactionRequired(f"database {using!r} is not PostgreSQL ({connection.vendor})")
    if not connection.in_atomic_block:
        raise TransactionRequired(
            f"enqueue/publish on Django's {using!r} connection needs transaction.atomic(): in"
            " autocommit mode the row would commit on its own"
        )
    connection.ensure_connection()
    raw = connection.connection
    if not isinstance(raw, psycopg.Connection):
        raise TransactionRequired(
            f"database {using!r} does not run on psycopg 3 (install psycopg; Django 4.2+ uses it)"
        )
    if raw.info.transaction_status == pq.TransactionStatus.IDLE and not raw.autocommit:
        # atomic() switched autocommit off; psycopg sends BEGIN with the first statement. Start
        # the transaction now, so the library's check sees the one it joins.
        raw.execute("SELECT 1")
    return raw


def enqueue(message: NewMessage, *, using: str = "default", notify: bool = True) -> EnqueueResult:
    """:func:`outbox_adapters.postgres.enqueue` on Django's connection, inside ``atomic()``."""
    return _enqueue(_connection(using), message, notify=notify)


def publish(*, using: str = "default", **event: Any) -> Published:  # noqa: ANN401
    """:func:`outbox_adapters.postgres.events.publish` on Django's connection, inside ``atomic()``
    (``topic=``, ``key=``, ``type=``, ``data=``, ...)."""
    return _publish(_connection(using), **event)


def database_url(using: str = "default") -> str:
    """A libpq connection string for Django's ``using`` database (what ``manage.py outbox`` hands
    the commands as ``--database-url``)."""
    from django.db import connections  # noqa: PLC0415

    params = connections[using].get_connection_params()
    keys = {
        "host": "host",
        "port": "port",
        "dbname": "dbname",
        "user": "user",
        "password": "password",
    }
    parts = {key: params.get(name) for name, key in keys.items() if params.get(name)}
    if "dbname" not in parts and params.get("database"):
        parts["dbname"] = params["database"]
    return psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in parts.items()})
