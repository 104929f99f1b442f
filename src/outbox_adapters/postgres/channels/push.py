"""Push for the in-app feed (ADR 0022): an AFTER INSERT trigger announces each new notification's
scope, and one LISTEN connection per process signals the SSE streams of that scope.

The trigger sends ``pg_notify('outbox_feed', '{"audience": ..., "tenant_id": ...}')`` and nothing
else: no id, no title, no body. A notification tells a stream only *whose* feed changed; the client
then refetches through the feed's scoped, authenticated queries. So nothing a tenant may not read
ever travels on the channel (every session of the database may LISTEN to it), the payload stays far
below PostgreSQL's 8,000-byte limit, and identical announcements of one transaction fold into one.
A tenant id too long to announce safely (over 1,000 bytes) is sent as ``null``: the listener then
signals every stream, which costs refetches, never a missed update.

:class:`ScopeListener` is the shared :class:`~outbox_adapters.postgres.notify.Listener` (one
dedicated connection, health checks, jittered reconnects, subscribers filed by key in a
:class:`~outbox_adapters.wakeup.WakeupHub`) on the feed's channel, keyed by scope. Each subscriber's signal is
an event, a queue of one that coalesces: however many notifications arrive while a slow client is
still being written to, it owes that client one refresh, and signalling it never blocks the
fan-out. After every (re)connect every subscriber is signalled (LISTEN has no replay).
"""

from __future__ import annotations

import json
import logging
from typing import Final

from outbox_adapters.postgres.channels.feed import Scope
from outbox_adapters.postgres.channels.tables import outbox_notification
from outbox_adapters.postgres.notify import Listener
from outbox_adapters.postgres.triggers import Trigger, attach
from outbox_adapters.wakeup import LaneWakeup

__all__ = ["FEED_CHANNEL", "FEED_TRIGGER", "ScopeListener", "scope_of"]

#: The LISTEN/NOTIFY channel of the feed; the payload is the new row's scope as JSON.
FEED_CHANNEL: Final = "outbox_feed"

_FUNCTION: Final = """
CREATE OR REPLACE FUNCTION outbox_notification_push() RETURNS trigger
LANGUAGE plpgsql AS $push$
BEGIN
    -- The scope only (ADR 0022): clients refetch through the feed's scoped queries.
    PERFORM pg_notify('outbox_feed', json_build_object(
        'audience', NEW.audience,
        'tenant_id', CASE WHEN octet_length(NEW.tenant_id) <= 1000 THEN NEW.tenant_id END
    )::text);
    RETURN NULL;
END
$push$
""".strip()

_TRIGGER: Final = """
DO $create$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_trigger
        WHERE tgname = 'outbox_notification_push'
          AND tgrelid = 'outbox_notification'::regclass
    ) THEN
        CREATE TRIGGER outbox_notification_push
        AFTER INSERT ON outbox_notification
        FOR EACH ROW EXECUTE FUNCTION outbox_notification_push();
    END IF;
END
$create$
""".strip()

#: The feed's push trigger on ``outbox_notification`` (created by ``outbox schema apply``).
FEED_TRIGGER: Final = Trigger("outbox_notification_push", (_FUNCTION, _TRIGGER))
attach(outbox_notification, FEED_TRIGGER)

_log = logging.getLogger(__name__)


def scope_of(payload: str) -> Scope | None:
    """The scope a notification announces; ``None`` when it names none that can be trusted."""
    try:
        found = json.loads(payload)
        return Scope(found["audience"], found["tenant_id"])
    except (ValueError, TypeError, KeyError):
        return None


class ScopeListener(Listener):
    """The feed's LISTEN connection, fanned out to the SSE streams by scope.

    ``async with ScopeListener(dsn) as listener:``, then one ``listener.subscribe(scope)`` per
    stream (held weakly: keep the reference while the stream is open).
    """

    channel = FEED_CHANNEL
    label = "feed"

    def subscribe(self, scope: Scope) -> LaneWakeup:
        """A new signal for one stream of ``scope``: set when the scope's feed may have changed."""
        return self._hub.subscribe(scope.key)

    def add(self, signal: LaneWakeup) -> None:
        """File a signal made by the stream (its key the scope's :attr:`Scope.key`)."""
        self._hub.add(signal)

    def refresh_all(self) -> None:
        """Signal every stream (after a gap, or to make them look at their state)."""
        self._hub.wake_all()

    def _notified(self, payload: str) -> None:
        scope = scope_of(payload)
        if scope is None:
            _log.warning("feed listener: a notification named no scope; refreshing every stream")
            self._hub.wake_all()
        else:
            self._hub.wake(scope.key)
