"""The SMTP mailer (ADR 0007), on aiosmtplib, reusing a few established sessions.

One delivery path serves every TLS mode (``starttls``, ``tls``, ``none``)::

    wait for a session slot (≤ smtp_exchange)      at most ``max_sessions`` sends own a session
    take an idle session — or open one:
        dial (≤ dial)                  TCP connect and greeting; implicit TLS handshake in ``tls``
        EHLO → plan_starttls → [STARTTLS → EHLO] → plan_auth → [AUTH]   ┐ exchange,
    one transaction: MAIL → RCPT… → DATA                                ┘ ≤ smtp_exchange
    give the session back to the idle pool — or QUIT it, or close it

Every window is ``outbox_core.lease.exchange_deadline(now, row_deadline, cap)``: the step's budget
from the lane's ``EmailStepBudgets`` (dial 10 s, smtp_exchange 30 s by default, ``--budget`` to
change them), never past the row's deadline. The mailer has no timeout figures of its own.

The decisions (upgrade or refuse, authenticate or refuse) are made by the pure policy in
``outbox_core.tls``; this module only carries them out. In ``starttls`` mode a server that does not
advertise STARTTLS is refused before a single MAIL, RCPT, DATA or AUTH command is sent — aiosmtplib's
own ``start_tls=None`` default would upgrade only *if* offered, which a man in the middle can strip.
A session enters the pool only after all of that succeeded, and is checked again (still connected,
TLS still on unless the mode is ``none``) every time it is taken.

Session rules (ADR 0007). One send owns a session at a time: aiosmtplib sessions are never shared.

- Back to the pool: after a delivered message, and after a clean 4xx/5xx reply to MAIL or RCPT
  followed by a successful RSET. Anything else mid-exchange (disconnect, timeout, TLS error, a 421,
  an unexpected reply, a refused DATA, cancellation) closes the session; it is never reused.
- Retired with QUIT (in the background, off the send's critical path) once it is older than
  ``session_max_age`` or has carried ``messages_per_session`` transactions.
- A reused session that is found dead on its first command (MAIL: the server closed it while it
  sat idle, so a disconnect or a 421) is replaced by a fresh session ONCE, inside the same budget:
  nothing of the message was sent, so this cannot duplicate. After MAIL succeeded, never.
- :meth:`SmtpMailer.aclose` QUITs the idle sessions. If the event loop ends without it, a keeper
  task (cancelled with the loop) closes them, so no socket outlives its loop.

Every third-party exception is translated in ONE place (:func:`outbox_adapters.smtp.errors.mapped`), by the stage the exchange
had reached, into an ``Outcome``: a reply code goes through ``classify_smtp_reply`` (4xx transient,
5xx permanent), a lost connection through ``classify_smtp_failure`` (transient; "may be delivered"
once the whole message was sent). Apart from the one stale-session replacement above, the mailer
never retries, and it never raises for a delivery problem.

Certificates are verified against the system trust store (so ``SSL_CERT_FILE`` works as usual) or a
CA file the operator names; the hostname is checked.
"""

from outbox_adapters.smtp.mailer import SmtpMailer
from outbox_adapters.smtp.settings import MailerStats, SmtpSettings

__all__ = ["MailerStats", "SmtpMailer", "SmtpSettings"]
