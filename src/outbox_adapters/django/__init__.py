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

Async views: ``await aenqueue(message)`` / ``await apublish(...)`` inside ``async with aatomic():``
(see :func:`aatomic` for what "the same transaction" means there).

``python manage.py outbox <command> ...`` runs any ``outbox`` command (``worker``, ``relay``,
``consume``, ``healthcheck``, ``prune``, ...) against the database Django is configured with: the
``DATABASES`` entry's NAME, USER, PASSWORD, HOST, PORT and every libpq parameter of its ``OPTIONS``
(:func:`conninfo_from_settings`). The app's label is ``leased_outbox`` (:mod:`.apps`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import psycopg
from psycopg import pq

from outbox_adapters.postgres import TransactionRequired
from outbox_adapters.postgres import enqueue as _enqueue
from outbox_adapters.postgres.events import Published
from outbox_adapters.postgres.events import publish as _publish
from outbox_core.messages import NewMessage
from outbox_core.ports import EnqueueResult

__all__ = [
    "DJANGO_ONLY_OPTIONS",
    "aatomic",
    "aenqueue",
    "apublish",
    "conninfo_from_settings",
    "database_url",
    "enqueue",
    "publish",
]


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


# --- async views ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def aatomic(
    using: str = "default", *, savepoint: bool = True, durable: bool = False
) -> AsyncIterator[None]:
    """``transaction.atomic()`` for async code: ``async with aatomic(): ...`` commits when the block
    ends, rolls back when it raises.

    Django's transactions are synchronous: a connection belongs to one thread, and
    ``transaction.atomic()`` keeps its state on the connection. So "the same transaction" in an
    async view means the same connection on the same thread. This block enters and leaves
    ``atomic()`` through ``asgiref``'s thread-sensitive ``sync_to_async``, which runs every
    thread-sensitive call of a request (of the event loop outside a request) on one thread, with
    the caller's Django connection; :func:`aenqueue`, :func:`apublish` and Django's own async ORM
    calls (``acreate``, ``asave``, ...; thread-sensitive too) run there, on that connection, inside
    the block. Await them one at a time: tasks still running when the block ends would write outside
    it. A synchronous function that opens ``atomic()`` itself and calls :func:`enqueue`, run with
    ``sync_to_async``, is the other way and needs none of this.
    """
    from asgiref.sync import sync_to_async  # noqa: PLC0415 - Django's dependency, imported late
    from django.db import transaction  # noqa: PLC0415

    block = transaction.atomic(using=using, savepoint=savepoint, durable=durable)
    await sync_to_async(block.__enter__, thread_sensitive=True)()
    try:
        yield
    except BaseException as exc:
        await sync_to_async(block.__exit__, thread_sensitive=True)(
            type(exc), exc, exc.__traceback__
        )
        raise
    await sync_to_async(block.__exit__, thread_sensitive=True)(None, None, None)


async def aenqueue(
    message: NewMessage, *, using: str = "default", notify: bool = True
) -> EnqueueResult:
    """:func:`enqueue` for async views: runs it with thread-sensitive ``sync_to_async``, on the
    thread and connection of the caller's open :func:`aatomic` block, so the row commits or rolls
    back with it; outside one it raises :class:`~outbox_adapters.postgres.TransactionRequired`."""
    from asgiref.sync import sync_to_async  # noqa: PLC0415

    return await sync_to_async(enqueue, thread_sensitive=True)(message, using=using, notify=notify)


async def apublish(*, using: str = "default", **event: Any) -> Published:  # noqa: ANN401
    """:func:`publish` for async views, in the caller's :func:`aatomic` block (as :func:`aenqueue`)."""
    from asgiref.sync import sync_to_async  # noqa: PLC0415

    return await sync_to_async(publish, thread_sensitive=True)(using=using, **event)


# --- manage.py outbox: the connection string ------------------------------------------------------

#: ``OPTIONS`` keys that shape how Django's ORM uses its own connections (Django's or psycopg's
#: connect arguments, not libpq parameters). The commands open connections of their own and choose
#: their own transaction modes, cursors and statements, so these are left out of the string:
#: ``pool`` (the app's pool; the worker has its own), ``isolation_level`` (the ORM's transactions;
#: the commands' claims need theirs), ``server_side_binding``, ``prepare_threshold``,
#: ``cursor_factory``, ``row_factory``, ``context`` and ``autocommit``.
DJANGO_ONLY_OPTIONS = frozenset(
    {
        "pool",
        "isolation_level",
        "server_side_binding",
        "prepare_threshold",
        "cursor_factory",
        "row_factory",
        "context",
        "autocommit",
    }
)


def _libpq_keywords() -> frozenset[str]:
    return frozenset(option.keyword.decode() for option in pq.Conninfo.get_defaults())


def _libpq_value(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _role_option(role: str) -> str:
    """``-c role=NAME`` for libpq's ``options``: what Django's ``assume_role`` (``SET ROLE``) does,
    for every connection from the start. Spaces and backslashes escaped as libpq reads them."""
    escaped = role.replace("\\", "\\\\").replace(" ", "\\ ")
    return f"-c role={escaped}"


def conninfo_from_settings(settings_dict: Mapping[str, Any], *, alias: str = "default") -> str:
    """The libpq connection string of a ``DATABASES`` entry, as Django's PostgreSQL backend connects.

    NAME (``None``: the ``postgres`` database; ``""``: ``OPTIONS["service"]`` names it), USER,
    PASSWORD, HOST and PORT, plus every ``OPTIONS`` key libpq accepts (``sslmode``,
    ``sslrootcert``, ``options="-c search_path=..."``, ``service``, ``connect_timeout``, ...),
    passed as they are. ``assume_role`` becomes ``-c role=NAME`` in ``options`` (the role Django
    switches to with ``SET ROLE``). The keys in :data:`DJANGO_ONLY_OPTIONS` are left out (their
    reason is there); any other key is refused with ``ImproperlyConfigured`` naming it (never its
    value, nor the password), as psycopg would refuse it when Django connects.
    """
    from django.core.exceptions import ImproperlyConfigured  # noqa: PLC0415

    where = f"DATABASES[{alias!r}]"
    options = dict(settings_dict.get("OPTIONS") or {})
    name = settings_dict.get("NAME")
    params: dict[str, str] = {}
    if name:
        params["dbname"] = str(name)
    elif name is None:
        options.pop("service", None)
        params["dbname"] = "postgres"
    elif not options.get("service"):
        raise ImproperlyConfigured(f"{where}: give NAME or OPTIONS['service']")
    role = options.pop("assume_role", None)
    libpq = _libpq_keywords()
    unknown = sorted(k for k in options if k not in libpq and k not in DJANGO_ONLY_OPTIONS)
    if unknown:
        raise ImproperlyConfigured(
            f"{where}['OPTIONS']: {', '.join(map(repr, unknown))} is not a libpq connection"
            " parameter (nor one of Django's own), so `manage.py outbox` cannot pass it on;"
            " remove it, or give the command --database-url"
        )
    params.update({k: _libpq_value(v) for k, v in options.items() if k in libpq and v is not None})
    if role:
        params["options"] = " ".join(filter(None, [params.get("options"), _role_option(role)]))
    for key, setting in (("user", "USER"), ("password", "PASSWORD"), ("host", "HOST")):
        if settings_dict.get(setting):
            params[key] = str(settings_dict[setting])
    if settings_dict.get("PORT"):
        params["port"] = str(settings_dict["PORT"])
    return psycopg.conninfo.make_conninfo("", **params)


def database_url(using: str = "default") -> str:
    """A libpq connection string for Django's ``using`` database (what ``manage.py outbox`` hands
    the commands as ``--database-url``): :func:`conninfo_from_settings` of its ``DATABASES``
    entry."""
    from django.db import connections  # noqa: PLC0415

    return conninfo_from_settings(connections[using].settings_dict, alias=using)
