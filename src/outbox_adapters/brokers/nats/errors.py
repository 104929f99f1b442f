"""nats-py's exceptions as core outcomes: the NATS adapter's own error map.

:data:`ERROR_MAP` names nats-py's exceptions; :data:`ERRORS` applies the shared rules of
:mod:`outbox_adapters.brokers.errors` with it alone, and its methods, exported here as
:func:`describe`, :func:`is_broker_error`, :func:`operation` and :func:`publish_outcome`, are what
the NATS modules call (docs/adr/0019-brokers.md, "One error mapping").
"""

from __future__ import annotations

from typing import Final

import attrs
import nats.errors
import nats.js.errors

from outbox_adapters.brokers.errors import BrokerErrors
from outbox_core.outcomes import Outcome

__all__ = [
    "ERRORS",
    "ERROR_MAP",
    "NatsErrors",
    "describe",
    "is_broker_error",
    "operation",
    "publish_outcome",
]


@attrs.frozen
class NatsErrors:
    """JetStream's refusals and nats-py's connection errors."""

    errors: tuple[type[BaseException], ...] = (nats.errors.Error,)

    def describe(self, exc: BaseException) -> str | None:
        if isinstance(exc, nats.js.errors.APIError):
            return f"JetStream error {exc.err_code or exc.code}: {exc.description or ''}"
        return None

    def outcome(self, exc: BaseException, subject: str, *, sending: bool) -> Outcome | None:
        del sending  # a NATS timeout is a TimeoutError: the shared rule decides it
        if isinstance(exc, nats.js.errors.NoStreamResponseError):
            return Outcome.transient(
                f"no JetStream stream stores subject {subject!r}: declare it (StreamSpec)"
            )
        if isinstance(exc, nats.errors.MaxPayloadError):
            return Outcome.permanent(f"the broker refuses this message: {describe(exc)}")
        if isinstance(exc, nats.js.errors.APIError):
            return Outcome.transient(f"the broker refused the publish: {describe(exc)}")
        return None


ERROR_MAP: Final = NatsErrors()
#: The shared rules with nats-py's map only.
ERRORS: Final = BrokerErrors((ERROR_MAP,))
describe: Final = ERRORS.describe
is_broker_error: Final = ERRORS.is_broker_error
operation: Final = ERRORS.operation
publish_outcome: Final = ERRORS.publish_outcome
