"""An e-mail lane as the host describes it: :class:`EmailLane`, its hooks and its mailer.

The same description is the sending half of the e-mail channel
(:class:`~outbox_adapters.app.event_lanes.EmailChannelLane`), so suppression, branding, a bounce
report and a mailer of the host's own apply to the channel's e-mails too.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final

import attrs

from outbox_adapters.app.context import COMMON_OPTIONS, AppSettings, LaneContext, lane_name
from outbox_adapters.extras import missing_extra
from outbox_adapters.lanes.email import EmailHandler, email_lane
from outbox_adapters.lanes.hooks import BounceReport, BrandingLookup, SuppressionCheck, check_hook
from outbox_adapters.lanes.send_caps import CappedMailer
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.runtime import LaneConfig, Worker
from outbox_core.backoff import Backoff
from outbox_core.errors import ConfigurationError
from outbox_core.ports import Mailer
from outbox_core.scrub import ScrubRules
from outbox_core.sealing import SealingRules
from outbox_core.send_caps import check_cap
from outbox_core.timing import EmailStepBudgets, EmailTiming

if TYPE_CHECKING:
    from outbox_adapters.smtp import SmtpSettings
    from outbox_core.brokers import StreamSpec

__all__ = ["EMAIL_OPTIONS", "EmailLane", "MailerFactory", "open_mailer"]

#: Makes the lane's mailer: given the SMTP settings (``None`` when the app names none) and the
#: step budgets, an async context manager yielding a :class:`~outbox_core.ports.Mailer`.
MailerFactory = Callable[
    ["SmtpSettings | None", EmailStepBudgets], AbstractAsyncContextManager[Mailer]
]

#: The ``outbox worker`` options of an e-mail lane: its timing, its rows in flight, SMTP.
EMAIL_OPTIONS: Final = frozenset(
    {
        "batch_size",
        "batch_timeout",
        "rows_in_flight",
        "group_marks",
        "budgets",
        "smtp_url",
        "smtp_tls",
        "sender",
        "sender_name",
        "allow_plaintext",
        "smtp_ca_file",
        "smtp_sessions",
        "environment",
        "max_per_domain",
        "max_per_second",
    }
)


def _hook(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    del inst
    check_hook(attribute.name, value)


def _cap(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    del inst
    flag = "--" + attribute.name.replace("_", "-")
    check_cap(f"EmailLane.{attribute.name} ({flag})", value)


def open_mailer(
    app: AppSettings, lane: str, factory: MailerFactory | None, budgets: EmailStepBudgets
) -> AbstractAsyncContextManager[Mailer]:
    """The mailer of ``lane``: the host's own ``factory``, or SMTP with ``app.smtp``."""
    if factory is not None:
        return factory(app.smtp, budgets)
    try:
        from outbox_adapters.smtp import SmtpMailer  # noqa: PLC0415 - the smtp extra
    except ImportError as exc:
        raise missing_extra(exc, f"the e-mail lane {lane!r}") from exc
    if app.smtp is None:
        raise ConfigurationError(f"the e-mail lane {lane!r} needs SMTP settings or a mailer")
    return SmtpMailer(app.smtp, steps=budgets)


@attrs.frozen
class EmailLane:
    """One e-mail lane of the host: its name and the host's hooks (each ``None``: not used).

    ``mailer``: the host's own mailer instead of SMTP (then ``smtp`` may be left out);
    ``timing``: the lane's step budgets and batch; ``rows_in_flight``: rows sent at once (a crash
    can duplicate at most that many); ``group_marks``: one statement records each window of
    rows in flight; ``backoff``: when a transient failure is retried (``None``: the e-mail lane's
    15 slots over about 72 hours); ``scrub``: the payload keys removed by the mark that records
    a row sent or skipped (``None``: the default secret keys, ADR 0006).

    Send caps (``None``: uncapped), shared by the lane's sends in this process
    (:mod:`outbox_core.send_caps`): ``max_per_domain``: sends in flight to one recipient domain at
    a time (a message to several domains takes a slot of each, in sorted order);
    ``max_per_second``: sends started per second. Waiting for a slot spends the row's budget; a
    send that gets none before its deadline is a transient failure, nothing sent."""

    name: str = attrs.field(default="email", validator=lane_name("EmailLane"))
    suppressed: SuppressionCheck | None = attrs.field(default=None, validator=_hook)
    branding: BrandingLookup | None = attrs.field(default=None, validator=_hook)
    bounce_report: BounceReport | None = attrs.field(default=None, validator=_hook)
    mailer: MailerFactory | None = None
    sender_name: str | None = None
    timing: EmailTiming = attrs.field(factory=EmailTiming)
    rows_in_flight: int = 1
    group_marks: bool = False
    backoff: Backoff | None = None
    scrub: ScrubRules | None = None
    max_per_domain: int | None = attrs.field(default=None, validator=_cap)
    max_per_second: int | None = attrs.field(default=None, validator=_cap)

    @property
    def options(self) -> frozenset[str]:
        return COMMON_OPTIONS | EMAIL_OPTIONS | {"leader"}

    @property
    def wakeup_lane(self) -> str:
        return self.name

    def config(self, app: AppSettings) -> LaneConfig:
        """The runtime's configuration of this lane (ConfigurationError naming what is wrong)."""
        stated: dict[str, Any] = {} if self.backoff is None else {"backoff": self.backoff}
        if self.scrub is not None:
            stated["scrub"] = self.scrub
        return email_lane(
            lane=self.name,
            timing=self.timing,
            poll_interval=app.poll_interval,
            rows_in_flight=self.rows_in_flight,
            group_marks=self.group_marks,
            **stated,
        )

    def sealing(self) -> SealingRules:
        """The fields a producer of this lane's rows seals when the app has keys: the lane's
        scrub keys, so what is sealed while unsent is removed once sent (ADR 0010)."""
        return SealingRules() if self.scrub is None else SealingRules(fields=self.scrub.keys)

    def check(self, app: AppSettings) -> None:
        if app.smtp is None and self.mailer is None:
            raise ConfigurationError(
                f"the e-mail lane {self.name!r} needs SMTP settings (--smtp-url) or a mailer"
            )
        if app.sender_address() is None:
            raise ConfigurationError(f"the e-mail lane {self.name!r} needs a sender (--sender)")
        self.config(app)

    def pool_size(self) -> int:
        # One claim, the leader lease and one mark per row in flight at a time (marks are
        # detached, so up to rows_in_flight of them run at once), plus one spare.
        return 3 + self.rows_in_flight

    def streams(self, app: AppSettings) -> Sequence[StreamSpec] | None:
        del app
        return None

    def describe(self, app: AppSettings) -> list[str]:
        n = self.rows_in_flight
        waits = ""
        if app.smtp is not None and self.mailer is None and n > app.smtp.max_sessions:
            waits = (
                f"; only {app.smtp.max_sessions} SMTP session(s) (--smtp-sessions):"
                " the rest wait for one"
            )
        lines = [
            f"timing: {self.timing.describe()}",
            f"rows in flight: {n} (a crash can duplicate at most {n} row(s))"
            + ("; marks grouped per window of rows in flight" if self.group_marks else "")
            + waits,
            app.smtp.describe()
            if app.smtp is not None and self.mailer is None
            else "mailer: the application's own",
        ]
        if self.max_per_domain is not None or self.max_per_second is not None:
            lines.append(f"send caps: {self.describe_caps()}")
        return lines

    def describe_caps(self) -> str:
        """The send caps in words (``uncapped`` when there are none)."""
        caps = []
        if self.max_per_domain is not None:
            caps.append(f"{self.max_per_domain} in flight per recipient domain")
        if self.max_per_second is not None:
            caps.append(f"{self.max_per_second} sends a second")
        return ", ".join(caps) or "uncapped"

    def capped(self, mailer: Mailer, context: LaneContext) -> Mailer:
        """``mailer`` behind the lane's send caps (itself when there are none): one per lane run,
        so every send of the lane in this process shares the caps."""
        if self.max_per_domain is None and self.max_per_second is None:
            return mailer
        return CappedMailer(
            mailer,
            clock=context.clock,
            max_per_domain=self.max_per_domain,
            max_per_second=self.max_per_second,
        )

    def handler(self, context: LaneContext, mailer: Mailer) -> EmailHandler:
        """The lane's row handler over ``mailer``, with the host's hooks and the app's keys."""
        sender = context.app.sender_address()
        assert sender is not None  # noqa: S101 - check() refused an app without one
        return EmailHandler(
            mailer,
            sender=sender,
            sender_name=self.sender_name,
            clock=context.clock,
            steps=self.timing.budgets,
            suppressed=self.suppressed,
            branding=self.branding,
            bounce_report=self.bounce_report,
            encryptor=context.app.encryptor,
            message_id_scope=context.database_scope,
        )

    @contextlib.asynccontextmanager
    async def workers(self, context: LaneContext) -> AsyncIterator[Worker]:
        """The lane's one worker: the runtime over the e-mail table with :meth:`handler`."""
        store = PostgresStore(context.pool)
        async with open_mailer(context.app, self.name, self.mailer, self.timing.budgets) as opened:
            mailer = self.capped(opened, context)
            try:
                yield Worker(
                    store,
                    self.handler(context, mailer),
                    self.config(context.app),
                    clock=context.clock,
                    leader=context.leader,
                    holder=context.holder,
                    wakeup=context.wakeup,
                    heartbeat=context.heartbeat,
                )
            finally:
                await store.close()  # the pool is the runner's
