"""The e-mail lane: the row handler that turns a claimed row into a message and sends it.

The payload is re-validated at send time (recipients, header values, templates): a row that can't
be turned into a safe message is a permanent failure with the reason, never an SMTP command. Secret
links live in their own payload keys and are substituted into the body here, at send time, so the
mark that records the send can scrub them from the stored row.

Enqueue helpers build a :class:`~outbox_core.messages.NewMessage` for the ``email`` lane and refuse a
bad message where the caller can catch it (``InvalidPayload``, ``InvalidRecipient``, ...).

With an :class:`~outbox_core.ports.Encryptor` (catalogue B1), :func:`email_message` seals the secret
fields *after* checking the plaintext (templates resolve against it), and :class:`EmailHandler` opens
them in memory just before rendering; a field it can't open fails the row at once, naming the field
and the key id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from outbox_adapters.runtime import LaneConfig
from outbox_core.backoff import EMAIL_BACKOFF
from outbox_core.errors import (
    ConfigurationError,
    InvalidMessage,
    InvalidPayload,
    InvalidRecipient,
)
from outbox_core.mail import build_message
from outbox_core.messages import ClaimedRow, NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.payload import RESERVED_KEYS, EmailPayload, decode_payload, validate_payload
from outbox_core.ports import Clock, Encryptor, Mailer
from outbox_core.sealing import SealingRules, open_sealed
from outbox_core.timing import DEFAULT_EMAIL_TIMING, EmailStepBudgets

__all__ = ["EMAIL_LANE", "EmailHandler", "email_lane", "email_message"]

#: The lane e-mail rows are written to unless the host picks another.
EMAIL_LANE = "email"


def email_lane(**settings: Any) -> LaneConfig:  # noqa: ANN401 - LaneConfig's own keywords
    """The e-mail lane's :class:`~outbox_adapters.runtime.LaneConfig`: lane ``email``, the e-mail
    timing (per-row 60 s, batch 5) and backoff (15 slots over ~72 h), unless ``settings`` say
    otherwise; any other :class:`LaneConfig` keyword passes through."""
    stated: dict[str, Any] = {
        "lane": EMAIL_LANE,
        "timing": DEFAULT_EMAIL_TIMING,
        "backoff": EMAIL_BACKOFF,
    }
    return LaneConfig(**{**stated, **settings})


def email_message(  # noqa: PLR0913 - keyword-only, one argument per message part
    *,
    to: str | Sequence[str],
    subject: str,
    text: str,
    html: str | None = None,
    reply_to: str | None = None,
    sender_name: str | None = None,
    fields: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
    not_before: datetime | None = None,
    lane: str = EMAIL_LANE,
    encryptor: Encryptor | None = None,
    sealing: SealingRules = SealingRules(),  # noqa: B008 - frozen, so one shared default is safe
) -> NewMessage:
    """A validated e-mail message to enqueue. Raises ``InvalidMessage`` subclasses on bad input.

    ``subject``, ``text`` and ``html`` are ``string.Template`` texts; ``$name`` placeholders are
    filled from ``fields`` at send time (e.g. ``password_reset_url``), so secret links can be
    scrubbed from the row once it is sent.

    With ``encryptor``, the fields named by ``sealing`` (the default scrub keys) are stored sealed
    under its active key, bound to ``lane`` and the field name. A field may not be named like a
    message part (``to``, ``subject``, ``text``, ``html``, ``reply_to``, ``sender_name``).
    """
    payload: dict[str, Any] = {**_template_fields(fields), "to": _recipients(to)}
    payload.update({"subject": subject, "text": text})
    optional = {"html": html, "reply_to": reply_to, "sender_name": sender_name}
    payload.update({key: value for key, value in optional.items() if value is not None})
    checked = validate_payload(payload)
    EmailPayload.from_payload(checked)  # every rule checked now, where the caller can catch it
    if encryptor is not None:
        # After the checks: templates must resolve against the plaintext fields. Validated again
        # because the envelopes make the payload larger.
        checked = validate_payload(sealing.seal(checked, lane=lane, encryptor=encryptor))
    return NewMessage(lane, checked, idempotency_key=idempotency_key, not_before=not_before)


def _recipients(to: object) -> str | list[Any]:
    if isinstance(to, str):
        return to
    if isinstance(to, list | tuple):
        return list(to)  # each one is checked by EmailPayload, with its own reason
    raise InvalidRecipient(
        f"'to' must be an address or a list of addresses, not {type(to).__name__}"
    )


def _template_fields(fields: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # The payload is flat ({**fields, to, subject, ...}) and optional parts are written only when
    # given, so a field named 'reply_to' would BE the Reply-To (a host passing user-supplied
    # template variables would let the user set it), 'html' the HTML body, and so on.
    reserved = sorted(key for key in (fields or {}) if key in RESERVED_KEYS)
    if reserved:
        raise InvalidPayload(
            f"template field {reserved[0]!r} is named like a message part; pass it as the"
            f" {reserved[0]}= argument, or give the field another name (reserved:"
            f" {', '.join(sorted(RESERVED_KEYS))})"
        )
    return fields or {}


def _same_steps(mailer: Mailer, steps: EmailStepBudgets | None) -> EmailStepBudgets:
    """The handler's step budgets: ``steps``, else the mailer's, else the defaults.

    A mailer that keeps step budgets (``SmtpMailer.steps``) must keep the same ones: the lease is
    derived from one set of figures, and a mailer dialling on another would not fit in it.
    """
    mailer_steps = getattr(mailer, "steps", None)
    if steps is None:
        steps = mailer_steps if isinstance(mailer_steps, EmailStepBudgets) else EmailStepBudgets()
    if not isinstance(steps, EmailStepBudgets):
        raise ConfigurationError(
            f"EmailHandler steps must be EmailStepBudgets, got {type(steps).__name__}"
        )
    if isinstance(mailer_steps, EmailStepBudgets) and mailer_steps != steps:
        raise ConfigurationError(
            "the mailer's step budgets differ from the handler's (give both the lane timing's"
            f" budgets): mailer {mailer_steps}, handler {steps}"
        )
    return steps


class EmailHandler:
    """:class:`outbox_core.ports.RowHandler` for the e-mail lane."""

    def __init__(  # noqa: PLR0913 - keyword-only collaborators and options
        self,
        mailer: Mailer,
        *,
        sender: str,
        clock: Clock,
        sender_name: str | None = None,
        message_id_domain: str | None = None,
        suppressed: Callable[[str], bool] | None = None,
        encryptor: Encryptor | None = None,
        steps: EmailStepBudgets | None = None,
    ) -> None:
        self.steps = _same_steps(mailer, steps)
        self.mailer = mailer
        self.sender = sender
        self.sender_name = sender_name
        self.clock = clock
        self.domain = message_id_domain or sender.rpartition("@")[2]
        self.suppressed = suppressed
        self.encryptor = encryptor

    def message_id(self, row: ClaimedRow) -> str:
        """Stable per row, so every attempt (and any duplicate) carries the same Message-ID."""
        return f"<outbox.{row.lane}.{row.id}.{int(row.created_at.timestamp())}@{self.domain}>"

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        try:
            # Opened in memory only: the stored row keeps its sealed fields until the mark scrubs them.
            # decode_payload: a row written around enqueue (not a JSON object, NaN, ...) is a
            # permanent failure here, not a handler crash retried for days.
            stored = decode_payload(row.payload)
            opened = open_sealed(stored, lane=row.lane, encryptor=self.encryptor)
            payload = EmailPayload.from_payload(opened)
            subject, text, html = payload.render()
            if self.suppressed is not None and all(self.suppressed(a) for a in payload.to):
                return Outcome.skipped("every recipient is suppressed")
            mail = build_message(
                sender=self.sender,
                sender_name=payload.sender_name or self.sender_name,
                to=payload.to,
                subject=subject,
                text=text,
                html=html,
                reply_to=payload.reply_to,
                message_id=self.message_id(row),
                date=self.clock.now(),
            )
        except InvalidMessage as exc:
            # Decode and decrypt refusals included ("undeliverable: cannot decrypt field 'x': key
            # id 'k1' is ..."): every refusal of a row's content reads the same in last_error.
            return Outcome.permanent(f"undeliverable: {exc}")
        return await self.mailer.send(mail, budget=budget)
