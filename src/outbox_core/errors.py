"""The one error hierarchy of ``outbox_core``.

Every error the core raises derives from :class:`OutboxError`, so a host can catch the whole family
with one clause. Errors that reject a bad value also derive from :class:`ValueError`, so code written
against plain Python conventions still catches them::

    OutboxError
    ├── ConfigurationError (ValueError)   a setting that can't work, refused at construction
    ├── InvalidMessage (ValueError)       a message refused at enqueue (or found undeliverable at send)
    │   ├── InvalidPayload                 not a JSON object, too large, a required field missing
    │   ├── InvalidRecipient               not a safe addr-spec (control characters, bad syntax, ...)
    │   ├── BlockedDestination             a webhook URL or address the destination guard refuses
    │   └── UnsafeHeader                   a header value that could inject a header or a line
    ├── IllegalTransition                 a move the delivery state machine does not allow
    ├── RequeueRefused                    a requeue that would resend a sent message or lose data
    ├── SecretUnavailable                 a stored webhook secret the configured keys can't open
    ├── StaleMark                         a mark whose claim was superseded (the fence said no)
    ├── StoreUnavailable                  the store could not be reached (an outage, not a bug)
    ├── StoreDataError (ValueError)        the store refused a value it cannot hold (not an outage)
    └── WebhookVerificationError          a webhook whose signature, timestamp or headers don't verify

Messages are sentences that name the offending value and the state it was in.
"""

from __future__ import annotations

__all__ = [
    "BlockedDestination",
    "ConfigurationError",
    "IllegalTransition",
    "InvalidMessage",
    "InvalidPayload",
    "InvalidRecipient",
    "OutboxError",
    "RequeueRefused",
    "SecretUnavailable",
    "StaleDeliveryMark",
    "StaleMark",
    "StoreDataError",
    "StoreUnavailable",
    "UnsafeHeader",
    "WebhookVerificationError",
]


class OutboxError(Exception):
    """Base of every error raised by leased-outbox."""


class ConfigurationError(OutboxError, ValueError):
    """A configuration that cannot work; raised when the object is built, never later."""


class InvalidMessage(OutboxError, ValueError):
    """A message that must not be sent as it stands."""


class InvalidPayload(InvalidMessage):
    """A payload that is not a JSON object, is too large, or lacks a required field."""


class InvalidRecipient(InvalidMessage):
    """An address that is not a plain, safe addr-spec."""


class BlockedDestination(InvalidMessage):
    """A webhook URL, host or resolved address the outbound destination guard refuses.

    The message names the reason and the host (never the URL's path or query: a webhook URL may
    carry a token in either).
    """


class UnsafeHeader(InvalidMessage):
    """A header value that could add a header or a line to the message."""


class IllegalTransition(OutboxError):
    """A state change the delivery state machine does not allow."""

    def __init__(self, state: object, event: object) -> None:
        self.state = state
        self.event = event
        super().__init__(f"a row in state {state!s} cannot take event {event!s}")


class RequeueRefused(OutboxError):
    """A requeue refused because it would resend a sent message or send an incomplete one."""


class SecretUnavailable(OutboxError):
    """A webhook signing secret stored sealed (ADR 0030) that the configured keys can't open: its
    key id is not configured, no keys are configured, or it does not authenticate.

    A key-configuration problem met while sending: the attempt posts nothing and is retried (a
    transient failure), so fixing the key list loses no delivery. The message names the endpoint
    and the key id, never key material.
    """


class StaleMark(OutboxError):
    """A mark refused by the fence: the row is no longer pending under the caller's claim token.

    The work was done, but another holder owns the row's outcome now (its lease expired and a sibling
    re-claimed it, or the row was already resolved). The mark is dropped, never applied. The store
    answers ``MarkResult.STALE``; the runtime reports it once, as this error's message, and counts it.
    """

    def __init__(self, row_id: object, status: object) -> None:
        self.row_id = row_id
        self.status = status
        super().__init__(f"stale mark dropped for row {row_id} ({status!s}): another claim owns it")


class StaleDeliveryMark(StaleMark):
    """A webhook delivery's mark refused by the fence: e.g. a late failure after a sibling's
    success (the delivery lane reports its stale marks as this)."""

    def __init__(self, row_id: object, status: object) -> None:
        super().__init__(row_id, status)
        message = f"stale delivery mark dropped for delivery {row_id} ({status!s}): another claim"
        self.args = (message + " owns it",)


class StoreUnavailable(OutboxError):
    """The store could not be reached or lost its connection: an outage, worth retrying.

    Each store adapter maps its driver's connection errors to this one type at its edge (the
    PostgreSQL store maps psycopg's ``OperationalError``, ``InterfaceError`` and pool timeouts), so
    the runtime retries an outage by catching one core type and never matches driver class names.
    Anything else a store raises is a bug or a row the statement can't take: not retried.
    """


class StoreDataError(OutboxError, ValueError):
    """The store refused a value it cannot hold: too long for an index, a NUL byte in text, a value
    out of range. A data error, not an outage: retrying gives the same answer, so the caller gives
    up on the value (a consumer acknowledges the message with a logged reason, and counts it).

    The PostgreSQL adapters raise it for SQLSTATE class 22 (data exception) and 54 (program limit
    exceeded) and for the driver's own refusal of a NUL byte; the message names the operation and
    the SQLSTATE, never the value.
    """


class WebhookVerificationError(OutboxError):
    """A received webhook whose headers, timestamp or signature do not verify."""
