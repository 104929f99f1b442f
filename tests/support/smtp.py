"""A client for the test SMTP servers: settings and mailers that reach them, trusting their CA only.

The servers are :class:`~outbox_adapters.demo.sink.SmtpSink` (aiosmtpd on 127.0.0.1 with a throwaway
``trustme`` CA) or a fault server of ``tests/faults``; either hands out its port and a client
``ssl.SSLContext`` that trusts its certificate and nothing else.
"""

from __future__ import annotations

import ssl
from typing import Any

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.tls import SmtpSecurityPolicy

#: The envelope and From address of the tests' mail.
SENDER = "noreply@shop.example"


def smtp_settings(
    port: int,
    tls_context: ssl.SSLContext,
    *,
    policy: SmtpSecurityPolicy | None = None,
    **kwargs: Any,
) -> SmtpSettings:
    """Settings for a server on 127.0.0.1:``port`` (STARTTLS, from :data:`SENDER` unless
    ``policy`` says otherwise); ``kwargs`` go to :class:`SmtpSettings` (budgets, pool sizes)."""
    return SmtpSettings(
        host="127.0.0.1",
        port=port,
        policy=policy or SmtpSecurityPolicy(sender=SENDER),
        tls_context=tls_context,
        **kwargs,
    )


def settings_for(sink: SmtpSink, **kwargs: Any) -> SmtpSettings:
    """:func:`smtp_settings` for ``sink``, trusting its CA unless ``tls_context`` is given."""
    context = kwargs.pop("tls_context", None) or sink.client_context()
    return smtp_settings(sink.port, context, **kwargs)


def mailer_for(sink: SmtpSink, **policy_kwargs: Any) -> SmtpMailer:
    """A mailer for ``sink`` under ``SmtpSecurityPolicy(**policy_kwargs)`` (sender defaulted)."""
    policy_kwargs.setdefault("sender", SENDER)
    return SmtpMailer(settings_for(sink, policy=SmtpSecurityPolicy(**policy_kwargs)))
