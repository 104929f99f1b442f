"""psycopg's outage errors, mapped once to the core's :class:`~outbox_core.errors.StoreUnavailable`,
and its data errors to :class:`~outbox_core.errors.StoreDataError`.

An *outage* is anything that says the database could not be reached or the connection was lost:
psycopg's ``OperationalError`` (connection refused or dropped, the server shutting down, a
statement cancelled, a serialization failure: worth a retry), ``InterfaceError`` (a closed
connection) and the pool's ``PoolTimeout`` (no connection in time). A *data error* is a value the
store cannot hold, whatever the retries: SQLSTATE class 22 (``DataError``: a NUL byte, a value out
of range) and class 54 (program limit exceeded: an index row too large; psycopg files it under
``OperationalError``, but it is no outage); it leaves as :class:`StoreDataError`. Everything else (a
missing table, a constraint the row breaks, a bug) propagates as it is.

Every method of :class:`~outbox_adapters.postgres.store.PostgresStore` goes through
:func:`mapped_outages`; the leader lease and the wake-up listener use :func:`as_unavailable`
where they catch connection problems. The message names the operation, the error class and its
SQLSTATE (or, for a client-side connection failure, libpq's first line, which names the host, never
a row); the driver's error is chained as ``__cause__`` for the full story. No row data, no
parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Final, ParamSpec, TypeVar

import psycopg
import psycopg_pool

from outbox_core.errors import StoreDataError, StoreUnavailable

__all__ = [
    "OUTAGES",
    "PostgresDataError",
    "PostgresUnavailable",
    "as_data_error",
    "as_unavailable",
    "is_data_error",
    "is_outage",
    "mapped_outages",
]

#: The psycopg errors that mean "the store is unavailable".
OUTAGES: Final = (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout)

P = ParamSpec("P")
R = TypeVar("R")


class PostgresUnavailable(StoreUnavailable):
    """:class:`StoreUnavailable` as the PostgreSQL adapters raise it. Catch :class:`StoreUnavailable`."""


class PostgresDataError(StoreDataError):
    """:class:`StoreDataError` as the PostgreSQL adapters raise it. Catch :class:`StoreDataError`."""


#: SQLSTATE classes of a value the store cannot hold: data exception, program limit exceeded.
_DATA_CLASSES: Final = ("22", "54")


def is_data_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the store cannot hold a value (SQLSTATE class 22 or 54, or psycopg's
    own ``DataError``, such as its refusal of a NUL byte in text), retrying or not."""
    if isinstance(exc, StoreDataError | psycopg.DataError):
        return True
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, psycopg.Error) and sqlstate[:2] in _DATA_CLASSES


def as_data_error(exc: BaseException, doing: str) -> StoreDataError:
    """The :class:`StoreDataError` to raise (``from exc``) for a data error met while ``doing``."""
    if isinstance(exc, StoreDataError):
        return exc
    sqlstate = getattr(exc, "sqlstate", None)
    why = f"SQLSTATE {sqlstate}" if sqlstate else "refused by the driver"
    return PostgresDataError(
        f"PostgreSQL store refused a value during {doing}: {type(exc).__name__} ({why})"
    )


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` is one of :data:`OUTAGES` (or already a :class:`StoreUnavailable`), and not
    a data error (:func:`is_data_error`)."""
    return isinstance(exc, (*OUTAGES, StoreUnavailable)) and not is_data_error(exc)


def as_unavailable(exc: BaseException, doing: str) -> StoreUnavailable:
    """The :class:`StoreUnavailable` to raise (``from exc``) for an outage met while ``doing``."""
    if isinstance(exc, StoreUnavailable):
        return exc
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate:
        # A server error: its text may quote a value (a DETAIL line); the SQLSTATE says enough.
        why = f"{type(exc).__name__} (SQLSTATE {sqlstate})"
    else:
        # A client-side failure (connect, a dropped socket, a pool timeout): libpq's or the pool's
        # first line names the host or the wait, never a row.
        text = str(exc).strip()
        why = f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
    return PostgresUnavailable(f"PostgreSQL store unavailable during {doing}: {why}")


def mapped_outages(
    method: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """Decorate a store coroutine so an outage leaves it as :class:`StoreUnavailable` and a data
    error as :class:`StoreDataError`."""
    doing = method.__name__

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except (*OUTAGES, psycopg.DataError) as exc:
            if is_data_error(exc):
                raise as_data_error(exc, doing) from exc
            raise as_unavailable(exc, doing) from exc

    return wrapper
