"""The one place where aiosmtplib, socket, TLS and timeout exceptions become core outcomes.

Every third-party exception of an SMTP exchange is translated here, by the stage the exchange had
reached: a reply code goes through ``classify_smtp_reply`` (4xx transient, 5xx permanent), a lost
connection through ``classify_smtp_failure`` (transient; "may be delivered" once the whole message
was sent). The runtime only ever sees an :class:`~outbox_core.outcomes.Outcome`.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator

import aiosmtplib

from outbox_core.classify import SmtpStage, classify_smtp_failure, classify_smtp_reply
from outbox_core.outcomes import Outcome, OutcomeKind

__all__ = ["Progress", "StaleSession", "mapped", "worst"]


class Progress:
    """How far the exchange got: the stage decides what a failure means."""

    def __init__(self) -> None:
        self.stage = SmtpStage.CONNECT
        #: Set while waiting for a session slot, so a timeout there says so.
        self.waiting = False
        #: The step window the exchange is in and its budget (``dial, budget 10s``).
        self.step = ""


@contextlib.contextmanager
def mapped(progress: Progress, result: list[Outcome]) -> Iterator[None]:
    """Translate every aiosmtplib / socket / TLS / timeout exception into an Outcome, once."""
    try:
        yield
    except aiosmtplib.SMTPRecipientsRefused as exc:
        first = exc.recipients[0]
        result.append(classify_smtp_reply(first.code, first.message))
    except aiosmtplib.SMTPResponseException as exc:
        if exc.code < 0:  # aiosmtplib's placeholder for "no reply at all"
            result.append(classify_smtp_failure(progress.stage, exc.message))
        else:
            result.append(classify_smtp_reply(exc.code, exc.message))
    except (TimeoutError, aiosmtplib.SMTPTimeoutError):
        what = "timed out waiting for a free session" if progress.waiting else "timed out"
        where = f" ({progress.step})" if progress.step else ""
        result.append(classify_smtp_failure(progress.stage, what + where))
    except ssl.SSLError as exc:
        result.append(classify_smtp_failure(SmtpStage.TLS, f"TLS failed: {exc.reason or exc}"))
    except (aiosmtplib.SMTPException, OSError) as exc:
        result.append(classify_smtp_failure(progress.stage, f"{type(exc).__name__}: {exc}"))


class StaleSession(Exception):
    """A reused session was dead on MAIL: replace it once. Never leaves :meth:`SmtpMailer._deliver`."""


def worst(outcomes: list[Outcome]) -> Outcome:
    """Any transient refusal means a retry could still reach that recipient."""
    for outcome in outcomes:
        if outcome.kind is OutcomeKind.TRANSIENT:
            return outcome
    return outcomes[0]
