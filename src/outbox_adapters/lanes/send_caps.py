"""The send caps of a lane, around its mailer or webhook sender (:mod:`outbox_core.send_caps`).

:class:`CappedMailer` wraps any :class:`~outbox_core.ports.Mailer` (SMTP or the host's own): a send
first takes one slot of each of its recipient domains (sorted order: no deadlock), then its start
from the lane's :class:`~outbox_core.send_caps.TokenBucket`, then sends with what is left of its
budget. :class:`PacedSender` does the rate part for a :class:`~outbox_core.ports.WebhookSender`.

One wrapper is made per lane run and shared by all of that lane's workers in the process, so the
caps hold across the process (not across processes: N worker processes send up to N times the
caps). Waiting for a slot spends the row's budget; a send that gets no slot before its deadline
was not started and reports a transient failure saying so (retried on the lane's schedule; the
attempt counts like any other transient failure). See docs/guides/email.md, "Send caps".
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from outbox_core.mail import OutgoingMail
from outbox_core.outcomes import Outcome
from outbox_core.ports import Clock, Mailer, WebhookSender
from outbox_core.send_caps import TokenBucket, check_cap, recipient_domains

__all__ = ["CappedMailer", "DomainSlots", "PacedSender", "Pacer"]

#: What a send refused by a cap says: it never reached the peer.
NOT_SENT: Final = "nothing was sent"


class _Slots:
    __slots__ = ("semaphore", "users")

    def __init__(self, size: int) -> None:
        self.semaphore = asyncio.Semaphore(size)
        self.users = 0


class DomainSlots:
    """At most ``per_domain`` holders per recipient domain at a time (one event loop's).

    A domain's entry lives while a send holds or waits for one of its slots, so a lane that mails
    many domains keeps no entry for the ones it is not sending to.
    """

    def __init__(self, per_domain: int) -> None:
        check_cap("max_per_domain", per_domain)
        self.per_domain = per_domain
        self._domains: dict[str, _Slots] = {}

    async def acquire(self, domains: Sequence[str]) -> None:
        """Take one slot of each of ``domains`` (in the order given: the caller sorts them); on
        cancellation (the caller's deadline) the slots already taken are given back."""
        taken: list[str] = []
        try:
            for domain in domains:
                slots = self._domains.get(domain)
                if slots is None:
                    slots = self._domains[domain] = _Slots(self.per_domain)
                slots.users += 1
                try:
                    await slots.semaphore.acquire()
                except BaseException:
                    self._leave(domain)
                    raise
                taken.append(domain)
        except BaseException:
            self.release(taken)
            raise

    def release(self, domains: Sequence[str]) -> None:
        """Give back one slot of each of ``domains``."""
        for domain in domains:
            self._domains[domain].semaphore.release()
            self._leave(domain)

    def _leave(self, domain: str) -> None:
        slots = self._domains[domain]
        slots.users -= 1
        if slots.users == 0:
            del self._domains[domain]

    def in_use(self) -> dict[str, int]:
        """The domains with a send holding or waiting for a slot, and how many (for tests)."""
        return {domain: slots.users for domain, slots in self._domains.items()}


class Pacer:
    """The lane's rate cap: ``per_second`` starts a second, the waits on ``clock``."""

    def __init__(self, per_second: int, clock: Clock) -> None:
        check_cap("max_per_second", per_second)
        self.per_second = per_second
        self.clock = clock
        self.bucket = TokenBucket(per_second)

    async def admit(self, deadline: float) -> Outcome | None:
        """Wait for this send's start; None once it may start, or the transient outcome of a send
        whose start would come after ``deadline`` (the clock's monotonic seconds): it was not
        started, and nothing was reserved."""
        now = self.clock.monotonic()
        admission = self.bucket.admit(now, latest=deadline)
        if not admission.admitted:
            return Outcome.transient(
                f"send rate cap: no start before the row's deadline ({self.per_second}/s; next"
                f" start in {admission.wait(now):.1f}s, deadline in"
                f" {max(0.0, deadline - now):.1f}s); {NOT_SENT}"
            )
        wait = admission.wait(now)
        if wait > 0:
            await self.clock.sleep(wait)
        return None


class CappedMailer:
    """A :class:`~outbox_core.ports.Mailer` whose sends take a slot per recipient domain
    (``max_per_domain``) and a start from the lane's rate (``max_per_second``) first; either may
    be ``None`` (no cap). Other attributes are the wrapped mailer's (its ``steps``, ``stats``)."""

    def __init__(
        self,
        inner: Mailer,
        *,
        clock: Clock,
        max_per_domain: int | None = None,
        max_per_second: int | None = None,
    ) -> None:
        self.inner = inner
        self.clock = clock
        self.domains = None if max_per_domain is None else DomainSlots(max_per_domain)
        self.pacer = None if max_per_second is None else Pacer(max_per_second, clock)

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - the wrapped mailer's attribute
        return getattr(self.inner, name)

    async def send(self, mail: OutgoingMail, *, budget: timedelta) -> Outcome:
        seconds = max(0.0, budget.total_seconds())
        deadline = self.clock.monotonic() + seconds
        domains = () if self.domains is None else recipient_domains(mail.recipients)
        if domains:
            assert self.domains is not None  # noqa: S101 - domains are looked up only then
            try:
                async with asyncio.timeout(seconds):
                    await self.domains.acquire(domains)
            except TimeoutError:
                return Outcome.transient(
                    f"send cap per recipient domain: no slot for {', '.join(domains)} within the"
                    f" row's budget ({self.domains.per_domain} at a time); {NOT_SENT}"
                )
        try:
            return await self._paced(mail, deadline)
        finally:
            if domains:
                assert self.domains is not None  # noqa: S101
                self.domains.release(domains)

    async def _paced(self, mail: OutgoingMail, deadline: float) -> Outcome:
        if self.pacer is not None:
            refusal = await self.pacer.admit(deadline)
            if refusal is not None:
                return refusal
        left = max(0.0, deadline - self.clock.monotonic())
        return await self.inner.send(mail, budget=timedelta(seconds=left))


class PacedSender:
    """A :class:`~outbox_core.ports.WebhookSender` whose requests start at most ``max_per_second``
    a second (the lane's rate; the per-origin cap stays the sender's own)."""

    def __init__(self, inner: WebhookSender, *, clock: Clock, max_per_second: int) -> None:
        self.inner = inner
        self.pacer = Pacer(max_per_second, clock)

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - the wrapped sender's attribute
        return getattr(self.inner, name)

    async def send(
        self, url: str, *, headers: Mapping[str, str], body: bytes, budget: timedelta
    ) -> Outcome:
        clock = self.pacer.clock
        deadline = clock.monotonic() + max(0.0, budget.total_seconds())
        refusal = await self.pacer.admit(deadline)
        if refusal is not None:
            return refusal
        left = max(0.0, deadline - clock.monotonic())
        return await self.inner.send(
            url, headers=headers, body=body, budget=timedelta(seconds=left)
        )
