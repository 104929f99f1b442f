"""The e-mail handler's host hooks, each run under its step budget (ADR 0015).

The per-row budget is the sum of the e-mail steps (suppression 5 s, branding 5 s, dial 10 s, SMTP
exchange 30 s, bounce report 5 s, mark 5 s); every one of them is enforced. The host's hooks are
the suppression check, the branding lookup and the bounce report. Each runs under
``asyncio.timeout_at(exchange_deadline(now, row_deadline, cap=its budget))``: its own budget, never
past the row's deadline. A hook that overruns or raises is that row's transient failure, with a
reason naming the step ("suppression check exceeded its 5s budget").

Hooks may be coroutine functions (the normal case: they do I/O) or plain callables; a plain one
runs in a worker thread (``asyncio.to_thread``), so a slow one can't stall the event loop and its
budget still ends the row's wait for it (the thread itself finishes on its own).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TypeAlias

import attrs

from outbox_core.errors import ConfigurationError
from outbox_core.lease import exchange_deadline
from outbox_core.mail import check_header_value
from outbox_core.messages import ClaimedRow
from outbox_core.outcomes import Refusal
from outbox_core.payload import RESERVED_KEYS

__all__ = [
    "BounceReport",
    "Branding",
    "BrandingLookup",
    "StepFailed",
    "SuppressionCheck",
    "check_hook",
    "within",
]

#: Which of these recipients are suppressed (bounced, complained, unsubscribed from everything)?
SuppressionCheck: TypeAlias = Callable[
    [tuple[str, ...]], Awaitable[Collection[str]] | Collection[str]
]


def _fields(value: Mapping[str, str]) -> Mapping[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and key not in RESERVED_KEYS and isinstance(item, str)
        for key, item in value.items()
    ):
        raise TypeError(
            "Branding.fields maps template field names (not message parts such as 'to' or"
            " 'subject') to strings"
        )
    return dict(value)


def _sender_name(_inst: object, _attribute: object, value: str | None) -> None:
    if value is not None:
        check_header_value(value, field="sender_name")


@attrs.frozen
class Branding:
    """The tenant's current look, for one row: the From display name and template fields.

    ``fields`` are the row's template fields as the tenant has them *now*; they override the
    row's fields of the same name (which hold the values the producer wrote at enqueue, so every
    placeholder still resolves when no branding is configured). ``sender_name`` is used when the
    row does not name one itself; it beats the handler's default.
    """

    #: The From display name (``"Acme Billing"``).
    sender_name: str | None = attrs.field(default=None, validator=_sender_name)
    #: Template fields (``brand_name``, ``support_email``, ...).
    fields: Mapping[str, str] = attrs.field(factory=dict, converter=_fields)


#: The branding of a row (its tenant is in its payload), or ``None`` for the defaults.
BrandingLookup: TypeAlias = Callable[[ClaimedRow], Awaitable[Branding | None] | Branding | None]
#: Told after a send which recipients the server refused permanently, and why (the host
#: suppresses them, tells the producer, ...). Must be idempotent: a row is retried if it fails.
BounceReport: TypeAlias = Callable[[ClaimedRow, tuple[Refusal, ...]], Awaitable[None] | None]


class StepFailed(Exception):
    """A hook overran its budget or raised: the row's transient failure, with this reason."""


def check_hook(name: str, hook: object) -> None:
    """Refuse a hook that can't be called, at the handler's construction."""
    if hook is not None and not callable(hook):
        raise ConfigurationError(f"EmailHandler {name} must be callable, got {type(hook).__name__}")


async def within(
    step: str, cap: float, row_deadline: float, hook: Callable[..., object], *args: object
) -> object:
    """Run ``hook(*args)`` under the step's window: ``cap`` seconds, never past ``row_deadline``.

    Raises :class:`StepFailed` naming ``step`` when it overruns or raises.
    """
    loop = asyncio.get_running_loop()
    now = loop.time()
    end = exchange_deadline(now=now, row_deadline=row_deadline, cap=cap)
    try:
        async with asyncio.timeout_at(end):
            if inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(
                getattr(hook, "__call__", None)  # noqa: B004 - an object with an async __call__
            ):
                result = hook(*args)
            else:
                result = await asyncio.to_thread(hook, *args)
            if inspect.isawaitable(result):
                result = await result
    except TimeoutError:
        if end < now + cap:
            raise StepFailed(
                f"{step} ran out of the row's time ({max(0.0, end - now):.1f}s were left of its"
                f" {cap:g}s budget)"
            ) from None
        raise StepFailed(f"{step} exceeded its {cap:g}s budget") from None
    except Exception as exc:  # noqa: BLE001 - a host hook's failure is this row's, not the batch's
        raise StepFailed(f"{step} raised {type(exc).__name__}") from None
    return result
