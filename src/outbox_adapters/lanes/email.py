"""The e-mail lane: the row handler that turns a claimed row into a message and sends it.

The payload is re-validated at send time (recipients, header values, templates): a row that can't
be turned into a safe message is a permanent failure with the reason, never an SMTP command. Secret
links live in their own payload keys and are substituted into the body here, at send time, so the
mark that records the send can scrub them from the stored row.

Enqueue helpers build a :class:`~outbox_core.messages.NewMessage` for the ``email`` lane and refuse a
bad message where the caller can catch it (``InvalidPayload``, ``InvalidRecipient``, ...).

With an :class:`~outbox_core.ports.Encryptor` (ADR 0010), :func:`email_message` seals the secret
fields *after* checking the plaintext (templates resolve against it), and :class:`EmailHandler` opens
them in memory just before rendering; a field it can't open fails the row at once, naming the field
and the key id.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from outbox_adapters.lanes.hooks import (
    BounceReport,
    Branding,
    BrandingLookup,
    StepFailed,
    SuppressionCheck,
    check_hook,
    within,
)
from outbox_adapters.runtime import LaneConfig
from outbox_core.backoff import EMAIL_BACKOFF
from outbox_core.email_payload import EmailPayload
from outbox_core.errors import (
    ConfigurationError,
    InvalidMessage,
    InvalidPayload,
    InvalidRecipient,
)
from outbox_core.mail import (
    ATTACHMENTS_KEY,
    Attachment,
    OutgoingMail,
    attachments_to_json,
    build_message,
)
from outbox_core.messages import ClaimedRow, NewMessage
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.payload import (
    MAX_MESSAGE_BYTES,
    RESERVED_KEYS,
    decode_payload,
    validate_payload,
)
from outbox_core.ports import Clock, Encryptor, Mailer
from outbox_core.recipients import delivered_before, settle, still_to_send, suppression_outcome
from outbox_core.sealing import SealingRules, open_sealed
from outbox_core.timing import DEFAULT_EMAIL_TIMING, EmailStepBudgets

__all__ = [
    "EMAIL_LANE",
    "Branding",
    "EmailHandler",
    "email_lane",
    "email_message",
    "row_message_id",
]

#: The lane e-mail rows are written to unless the host picks another.
EMAIL_LANE = "email"


def row_message_id(
    lane: str, row_id: object, created_at: datetime, *, domain: str, scope: str = ""
) -> str:
    """The Message-ID of the e-mail of row ``row_id`` of ``lane``, enqueued at ``created_at``:
    ``<token@domain>``, the token 32 base32 characters of the SHA-256 of ``scope``, the lane, the
    row id and the enqueue time (to the microsecond).

    Opaque (the row id cannot be read from it) and the same on every attempt at the row (all its
    inputs are fixed at enqueue), so a receiver can tell copies of one row from other mail. Two
    databases whose rows share ids and a sender domain (staging and production, a restored dump)
    give different ids: ``scope`` names the database (``outbox worker`` passes the PostgreSQL
    cluster's system identifier and the database's oid, so a dump restored into another cluster or
    database has another scope), and rows of one id enqueued at different instants differ anyway.
    """
    created = created_at.astimezone(UTC).isoformat(timespec="microseconds")
    identity = "\x1f".join((scope, lane, str(row_id), created)).encode()
    digest = hashlib.sha256(b"leased-outbox message-id\x00" + identity).digest()[:20]
    return f"<{base64.b32encode(digest).decode('ascii').lower()}@{domain}>"


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
    attachments: Sequence[Attachment | tuple[str, str, bytes]] = (),
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
    message part (``to``, ``subject``, ``text``, ``html``, ``reply_to``, ``sender_name``,
    ``attachments``).

    ``attachments`` are :class:`~outbox_core.mail.Attachment` objects or ``(filename,
    content_type, content)`` triples, stored base64 under ``attachments`` (a default scrub key:
    the files leave the row once it is sent). Limits: :data:`~outbox_core.mail.MAX_ATTACHMENTS`
    files, :data:`~outbox_core.mail.MAX_ATTACHMENT_BYTES` each,
    :data:`~outbox_core.mail.MAX_ATTACHMENTS_BYTES` together; the rest of the message must fit
    :data:`~outbox_core.payload.MAX_MESSAGE_BYTES`.
    """
    payload: dict[str, Any] = {**_template_fields(fields), "to": _recipients(to)}
    payload.update({"subject": subject, "text": text})
    optional = {"html": html, "reply_to": reply_to, "sender_name": sender_name}
    payload.update({key: value for key, value in optional.items() if value is not None})
    checked = validate_payload(payload, max_bytes=MAX_MESSAGE_BYTES)
    if attachments:
        # Strings only, written here: the store checks the whole payload's size when it writes it.
        checked[ATTACHMENTS_KEY] = attachments_to_json(attachments)
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
    """:class:`outbox_core.ports.RowHandler` for the e-mail lane: the step chain of ADR 0015.

    For each row, under the row's deadline::

        decode, open sealed fields, validate        (a bad row fails at once, permanently)
        recipients still to send                    (those an earlier attempt delivered are left out)
        suppression check   ≤ steps.suppression     a suppressed recipient fails the row at once,
                                                    permanently, before any SMTP traffic
        branding            ≤ steps.branding        the tenant's sender name and template fields
        SMTP                dial ≤ steps.dial, exchange ≤ steps.smtp_exchange (the mailer)
        settle              per-recipient results → the row's outcome (outbox_core.recipients)
        bounce report       ≤ steps.bounce_report   told the permanently refused recipients

    Each hook's window is ``exchange_deadline(now, row_deadline, cap=its budget)``; the send's
    deadline keeps the bounce report's budget free when a bounce report is configured. A hook
    that overruns or raises is the row's transient failure, naming the step.
    """

    def __init__(  # noqa: PLR0913 - keyword-only collaborators and options
        self,
        mailer: Mailer,
        *,
        sender: str,
        clock: Clock,
        sender_name: str | None = None,
        message_id_domain: str | None = None,
        message_id_scope: str = "",
        suppressed: SuppressionCheck | None = None,
        branding: BrandingLookup | None = None,
        bounce_report: BounceReport | None = None,
        encryptor: Encryptor | None = None,
        steps: EmailStepBudgets | None = None,
    ) -> None:
        self.steps = _same_steps(mailer, steps)
        for name, hook in (
            ("suppressed", suppressed),
            ("branding", branding),
            ("bounce_report", bounce_report),
        ):
            check_hook(name, hook)
        self.mailer = mailer
        self.sender = sender
        self.sender_name = sender_name
        self.clock = clock
        self.domain = message_id_domain or sender.rpartition("@")[2]
        #: What tells this database's rows from another's with the same ids (row_message_id).
        self.message_id_scope = message_id_scope
        self.suppressed = suppressed
        self.branding = branding
        self.bounce_report = bounce_report
        self.encryptor = encryptor
        # As seconds, once (the budgets are frozen): the per-row path reads them.
        self._suppression = self.steps.suppression.total_seconds()
        self._branding = self.steps.branding.total_seconds()
        self._bounce = self.steps.bounce_report.total_seconds()

    def message_id(self, row: ClaimedRow) -> str:
        """Stable per row, so every attempt (and any duplicate) carries the same Message-ID;
        opaque and unique per database (:func:`row_message_id`)."""
        return row_message_id(
            row.lane, row.id, row.created_at, domain=self.domain, scope=self.message_id_scope
        )

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        loop = asyncio.get_running_loop()
        row_deadline = loop.time() + budget.total_seconds()
        try:
            prepared = await self._prepare(row, row_deadline)
        except InvalidMessage as exc:
            # Decode and decrypt refusals included ("undeliverable: cannot decrypt field 'x': key
            # id 'k1' is ..."): every refusal of a row's content reads the same in last_error.
            return Outcome.permanent(f"undeliverable: {exc}")
        except StepFailed as exc:
            return Outcome.transient(str(exc))
        if isinstance(prepared, Outcome):
            return prepared
        mail, delivered = prepared
        # The send never eats the bounce report's budget: it is the step after it.
        reserve = self._bounce if self.bounce_report is not None else 0.0
        left = max(0.0, row_deadline - reserve - loop.time())
        attempt = await self.mailer.send(mail, budget=timedelta(seconds=left))
        outcome = settle(attempt, delivered_before=delivered)
        bounced = tuple(r for r in attempt.refused if r.outcome.kind is OutcomeKind.PERMANENT)
        if bounced and self.bounce_report is not None:
            try:
                await within(
                    "bounce report", self._bounce, row_deadline, self.bounce_report, row, bounced
                )
            except StepFailed as exc:
                # Retried (the refused recipients are refused again and reported again); who
                # already has the message is still recorded, so nobody gets it twice.
                return Outcome.transient(f"{exc} (after the send)").with_progress(outcome.progress)
        return outcome

    async def _prepare(
        self, row: ClaimedRow, row_deadline: float
    ) -> tuple[OutgoingMail, frozenset[str]] | Outcome:
        """The message for the recipients still to send, or the outcome that ends the row now."""
        # Opened in memory only: the stored row keeps its sealed fields until the mark scrubs them.
        # decode_payload: a row written around enqueue (not a JSON object, NaN, ...) is a
        # permanent failure here, not a handler crash retried for days.
        stored = decode_payload(row.payload)
        opened = open_sealed(stored, lane=row.lane, encryptor=self.encryptor)
        payload = EmailPayload.from_payload(opened)
        delivered = delivered_before(stored)
        remaining = still_to_send(payload.to, stored)
        if not remaining:
            return Outcome.sent()  # an earlier attempt delivered to everyone
        if self.suppressed is not None:
            found = await within(
                "suppression check", self._suppression, row_deadline, self.suppressed, remaining
            )
            refusal = suppression_outcome(remaining, _addresses(found))
            if refusal is not None:
                return refusal
        sender_name = payload.sender_name or self.sender_name
        if self.branding is not None:
            brand = await within("branding", self._branding, row_deadline, self.branding, row)
            payload, sender_name = _branded(payload, brand, sender_name)
        subject, text, html = payload.render()
        mail = build_message(
            sender=self.sender,
            sender_name=sender_name,
            to=payload.to,
            subject=subject,
            text=text,
            html=html,
            reply_to=payload.reply_to,
            attachments=payload.attachments,
            message_id=self.message_id(row),
            date=self.clock.now(),
        )
        # The header names every recipient; the envelope only those still to send.
        return attrs.evolve(mail, recipients=remaining), delivered


def _addresses(found: object) -> Collection[str]:
    """What a suppression check returned, as addresses; anything else is the hook's failure."""
    if isinstance(found, str) or not isinstance(found, Collection):
        raise StepFailed(
            f"suppression check returned {type(found).__name__}, not a collection of addresses"
        )
    return [item for item in found if isinstance(item, str)]


def _branded(
    payload: EmailPayload, brand: object, sender_name: str | None
) -> tuple[EmailPayload, str | None]:
    """The payload with the tenant's fields, and the sender name (the row's own wins)."""
    if brand is None:
        return payload, sender_name
    if not isinstance(brand, Branding):
        raise StepFailed(f"branding returned {type(brand).__name__}, not Branding or None")
    if brand.fields:
        payload = attrs.evolve(payload, fields={**payload.fields, **brand.fields})
    return payload, payload.sender_name or brand.sender_name or sender_name
