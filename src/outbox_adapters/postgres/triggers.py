"""Triggers that belong to an outbox table, created and checked with the tables themselves.

SQLAlchemy ``MetaData`` has no notion of a trigger, so a table that needs one carries it in its
``info`` (:func:`attach`). Three ways reach it:

- ``outbox schema apply|sql`` (:mod:`.schema`) emits each table's triggers after its DDL, and
  ``outbox schema verify`` reports a missing or disabled one;
- ``metadata.create_all()`` runs them right after the table's CREATE (an ``after_create`` hook);
- a host on Alembic, whose autogenerate does not see triggers, adds ``op.execute(statement)`` for
  each of :attr:`Trigger.ddl` to a migration (docs/guides/feed.md).

Every statement is idempotent: the function is ``CREATE OR REPLACE`` (a newer release's body
replaces an older one) and the trigger is created only when the table has none of that name.
"""

from __future__ import annotations

import weakref

import attrs
from sqlalchemy import DDL, Table, event

__all__ = ["Trigger", "attach", "triggers_of"]

#: Each table's triggers, by the table object. Not in ``Table.info``: Alembic's autogenerate
#: writes a table's ``info`` into the migration it generates, and a Trigger there is a NameError
#: in the host's migration file (tests/integration/test_alembic.py).
_TRIGGERS: weakref.WeakKeyDictionary[Table, list[Trigger]] = weakref.WeakKeyDictionary()


@attrs.frozen
class Trigger:
    """A named trigger on a table and the statements that create it."""

    #: The trigger's name (unique per table).
    name: str
    #: The statements, in order, each without a semicolon.
    ddl: tuple[str, ...]


def attach(table: Table, trigger: Trigger) -> None:
    """File ``trigger`` with ``table`` for the schema tools, and for ``metadata.create_all()``."""
    _TRIGGERS.setdefault(table, []).append(trigger)
    for statement in trigger.ddl:
        # DDL() formats its text with %: the statements hold no % of their own, but escape anyway.
        event.listen(table, "after_create", DDL(statement.replace("%", "%%")))  # type: ignore[no-untyped-call]


def triggers_of(table: Table) -> tuple[Trigger, ...]:
    """The triggers :func:`attach` filed with ``table``."""
    return tuple(_TRIGGERS.get(table, ()))
