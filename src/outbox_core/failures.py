"""How many times a consumer's handling of one message has failed, and when to give up on it.

A consumer channel redelivers a message for three different reasons, and only one of them is the
message's own fault (docs/adr/0021-consumer-channels.md):

- its recipients are still being delivered (e-mail rows pending a retry): the redelivery is a
  recheck, bounded by the rows' own retry schedule; it is never counted here;
- the store or the broker is unreachable (an outage): the message is retried until the outage
  ends, so nothing is parked because a database restarted; never counted here either;
- handling it *failed* (the channel raised, or overran its deadline): counted, and at the
  ``bound``-th failure the consumer parks the message instead of retrying it again.

:class:`FailureTally` is that count, per consumer process, kept for at most ``size`` messages (the
oldest forgotten first), so a stream of distinct failing messages cannot grow it without limit.
Two replicas count separately: a message failing on both is parked after at most ``bound``
failures on one of them.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

import attrs

from outbox_core.errors import ConfigurationError

__all__ = ["MAX_FAILURES", "TALLY_SIZE", "FailureTally"]

#: Failed handlings of one message before it is parked instead of retried.
MAX_FAILURES: Final = 20
#: Messages a tally remembers at most (each costs an id and an int).
TALLY_SIZE: Final = 10_000


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        msg = f"{attribute.name} must be at least 1, got {value}"
        raise ConfigurationError(msg)


@attrs.define
class FailureTally:
    """Failures per message id; :meth:`failed` says when the bound is reached."""

    bound: int = attrs.field(default=MAX_FAILURES, validator=_positive)
    size: int = attrs.field(default=TALLY_SIZE, validator=_positive)
    _counts: OrderedDict[str, int] = attrs.field(factory=OrderedDict, init=False)

    def failed(self, message_id: str) -> bool:
        """Count one failed handling of ``message_id``; ``True`` once it has failed ``bound``
        times (the caller parks it)."""
        count = self._counts.pop(message_id, 0) + 1
        self._counts[message_id] = count
        while len(self._counts) > self.size:
            self._counts.popitem(last=False)
        return count >= self.bound

    def count(self, message_id: str) -> int:
        """Failed handlings of ``message_id`` remembered so far."""
        return self._counts.get(message_id, 0)

    def settled(self, message_id: str) -> None:
        """``message_id`` was acknowledged or parked: forget it."""
        self._counts.pop(message_id, None)

    def __len__(self) -> int:
        return len(self._counts)
