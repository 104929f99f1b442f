"""Recording peers for tests: a mailer and a row handler that record every call and
return scripted outcomes.

Each scripted result is used once: a result for one key (a recipient, a row id) wins over the
shared sequence, which wins over the default (``Outcome.sent()`` unless told otherwise). A result
may be an :class:`~outbox_core.outcomes.Outcome` to return, an exception to raise, or a coroutine
function to await, which lets a test make a send slow, block it on an event, or decide at the last
moment.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Iterable
from datetime import timedelta
from typing import Generic, TypeAlias, TypeVar

import attrs

from outbox_core.mail import OutgoingMail, validate_address
from outbox_core.messages import ClaimedRow, RowId
from outbox_core.outcomes import Outcome, OutcomeKind

__all__ = ["HandlerCall", "MailAttempt", "RecordingHandler", "RecordingMailer", "Scripted"]

#: What a scripted send does: return this outcome, raise this exception, or await this callable
#: (to make a send slow, block on an event, or decide at the last moment).
Scripted: TypeAlias = Outcome | BaseException | Callable[[], Awaitable[Outcome]]

_K = TypeVar("_K", bound=Hashable)


class _Script(Generic[_K]):
    """Results to hand out: the first key with a queue wins, then the shared queue, then the
    default."""

    def __init__(self, default: Outcome) -> None:
        self.default = default
        self._queue: deque[Scripted] = deque()
        self._by_key: dict[_K, deque[Scripted]] = {}

    def add(self, results: Iterable[Scripted]) -> None:
        self._queue.extend(results)

    def add_for(self, key: _K, results: Iterable[Scripted]) -> None:
        self._by_key.setdefault(key, deque()).extend(results)

    def pop(self, keys: Iterable[_K]) -> Scripted:
        for key in keys:
            queue = self._by_key.get(key)
            if queue:
                return queue.popleft()
        return self._queue.popleft() if self._queue else self.default


async def _play(result: Scripted) -> Outcome:
    if isinstance(result, BaseException):
        raise result
    if isinstance(result, Outcome):
        return result
    return await result()


@attrs.frozen
class MailAttempt:
    """One call of :meth:`RecordingMailer.send`."""

    mail: OutgoingMail
    budget: timedelta
    #: What the send returned; ``None`` when it raised.
    outcome: Outcome | None
    #: What the send raised, if it did.
    error: BaseException | None = None


class RecordingMailer:
    """:class:`outbox_core.ports.Mailer` that records every message and sends nothing.

    By default every send returns ``Outcome.sent()``. Script other results with :meth:`script`
    (in sequence, for whatever mail comes next) or :meth:`script_recipient` (for mail to one
    address; it wins over the sequence); each scripted result is used once, then the default
    applies again.
    """

    def __init__(self, *, default: Outcome | None = None) -> None:
        self._script: _Script[str] = _Script(default or Outcome.sent())
        #: Every call, in order, with what it returned or raised.
        self.attempts: list[MailAttempt] = []

    def script(self, *results: Scripted) -> None:
        """The results of the next sends, in order, whoever they are for."""
        self._script.add(results)

    def script_recipient(self, address: str, *results: Scripted) -> None:
        """The results of the next sends to ``address`` (normalised as the mail's recipients are)."""
        self._script.add_for(validate_address(address), results)

    async def send(self, mail: OutgoingMail, *, budget: timedelta) -> Outcome:
        result = self._script.pop(mail.recipients)
        try:
            outcome = await _play(result)
        except BaseException as error:
            self.attempts.append(MailAttempt(mail, budget, None, error))
            raise
        self.attempts.append(MailAttempt(mail, budget, outcome))
        return outcome

    @property
    def sent(self) -> list[OutgoingMail]:
        """The messages whose send returned ``sent``, in order."""
        return [
            a.mail
            for a in self.attempts
            if a.outcome is not None and a.outcome.kind is OutcomeKind.SENT
        ]

    def count(self, recipient: str | None = None) -> int:
        """How many sends were attempted (to ``recipient``, when given)."""
        if recipient is None:
            return len(self.attempts)
        address = validate_address(recipient)
        return sum(1 for a in self.attempts if address in a.mail.recipients)


@attrs.frozen
class HandlerCall:
    """One call of :class:`RecordingHandler`."""

    row: ClaimedRow
    budget: timedelta
    #: What the handler returned; ``None`` when it raised.
    outcome: Outcome | None
    #: What the handler raised, if it did.
    error: BaseException | None = None


class RecordingHandler:
    """:class:`outbox_core.ports.RowHandler` that records every row and returns scripted outcomes.

    Like :class:`RecordingMailer`: ``Outcome.sent()`` by default; :meth:`script` for the next rows
    in order, :meth:`script_row` for one row id (it wins).
    """

    def __init__(self, *, default: Outcome | None = None) -> None:
        self._script: _Script[RowId] = _Script(default or Outcome.sent())
        #: Every call, in order, with what it returned or raised.
        self.calls: list[HandlerCall] = []

    def script(self, *results: Scripted) -> None:
        """The results of the next rows, in order, whichever they are."""
        self._script.add(results)

    def script_row(self, row_id: RowId, *results: Scripted) -> None:
        """The results of the next attempts of row ``row_id``."""
        self._script.add_for(row_id, results)

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        result = self._script.pop([row.id])
        try:
            outcome = await _play(result)
        except BaseException as error:
            self.calls.append(HandlerCall(row, budget, None, error))
            raise
        self.calls.append(HandlerCall(row, budget, outcome))
        return outcome

    def count(self, row_id: RowId | None = None) -> int:
        """How many times the handler ran (for row ``row_id``, when given)."""
        return sum(1 for c in self.calls if row_id is None or c.row.id == row_id)
