"""How many SSE streams are open, per principal and in the process, and the caps on both.

A stream takes its slot before its first byte is sent and gives it back when it ends, with no
``await`` between the check and the taking, so concurrent requests cannot all slip under a cap.
Past ``FeedSettings.max_streams_per_principal`` a new stream is a 429, past ``max_streams`` a 503,
each with a ``Retry-After`` and counted in the metric ``outbox.feed.streams_refused``
(docs/operations.md, "Metrics"). The ADR 0022 cap on a stream's lifetime is what makes a client
that was refused come back: its ``EventSource`` gives up on the refusal, and the page reconnects
later (the reference dashboard after its poll interval).
"""

from __future__ import annotations

from collections import Counter
from typing import Final, Literal

from outbox_adapters.telemetry.metrics import stream_refused

__all__ = ["RETRY_AFTER", "StreamSlots"]

#: The ``Retry-After`` of a refused stream, in seconds.
RETRY_AFTER: Final = 30


class StreamSlots:
    """The open streams' count by principal key (:attr:`Principal.key`) and in all."""

    def __init__(self, per_principal: int, total: int) -> None:
        self.per_principal = per_principal
        self.total = total
        self._held: Counter[str] = Counter()
        self.open = 0

    def take(self, key: str) -> Literal["principal", "process"] | None:
        """Take a slot for ``key``; the cap that refuses it (counted) instead, if one does."""
        refused: Literal["principal", "process"] | None = None
        if self.open >= self.total:
            refused = "process"
        elif self._held[key] >= self.per_principal:
            refused = "principal"
        if refused is not None:
            stream_refused(refused)
            return refused
        self._held[key] += 1
        self.open += 1
        return None

    def give_back(self, key: str) -> None:
        self.open -= 1
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]

    def held(self, key: str) -> int:
        return self._held[key]
