"""An e-mail lane as the host describes it: :class:`EmailLane`, its hooks and its mailer."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import attrs

from outbox_adapters.lanes.hooks import BounceReport, BrandingLookup, SuppressionCheck, check_hook
from outbox_core.errors import ConfigurationError
from outbox_core.messages import check_lane_name
from outbox_core.ports import Mailer
from outbox_core.timing import EmailStepBudgets, EmailTiming

if TYPE_CHECKING:
    from outbox_adapters.smtp import SmtpSettings

__all__ = ["EmailLane", "MailerFactory"]

#: Makes the lane's mailer: given the SMTP settings (``None`` when the app names none) and the
#: step budgets, an async context manager yielding a :class:`~outbox_core.ports.Mailer`.
MailerFactory = Callable[
    ["SmtpSettings | None", EmailStepBudgets], AbstractAsyncContextManager[Mailer]
]


def _lane_name(_inst: object, _attribute: object, value: str) -> None:
    try:
        check_lane_name(value)
    except ValueError as exc:
        raise ConfigurationError(f"EmailLane.name: {exc}") from None


def _hook(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    del inst
    check_hook(attribute.name, value)


@attrs.frozen
class EmailLane:
    """One e-mail lane of the host: its name and the host's hooks (each ``None``: not used).

    ``mailer``: the host's own mailer instead of SMTP (then ``smtp`` may be left out);
    ``timing``: the lane's step budgets and batch; ``rows_in_flight``: rows sent at once."""

    name: str = attrs.field(default="email", validator=_lane_name)
    suppressed: SuppressionCheck | None = attrs.field(default=None, validator=_hook)
    branding: BrandingLookup | None = attrs.field(default=None, validator=_hook)
    bounce_report: BounceReport | None = attrs.field(default=None, validator=_hook)
    mailer: MailerFactory | None = None
    sender_name: str | None = None
    timing: EmailTiming = attrs.field(factory=EmailTiming)
    rows_in_flight: int = 1
