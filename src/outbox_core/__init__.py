"""leased-outbox's pure core: every delivery rule, with no I/O.

It takes ``now``, jitter and configuration as arguments and imports only the standard library and
``attrs``. The adapters (``outbox_adapters``) do the I/O and report outcomes; this package decides.

The names below are the common ones; each module's ``__all__`` lists the rest.
"""

from outbox_core.backoff import (
    CONSUMER_BACKOFF,
    EMAIL_BACKOFF,
    WEBHOOK_BACKOFF,
    ExponentialBackoff,
    SlotSchedule,
)
from outbox_core.classify import (
    HttpAttempt,
    HttpFailure,
    SmtpStage,
    classify_http,
    classify_smtp_failure,
    classify_smtp_reply,
)
from outbox_core.decide import decide
from outbox_core.delivery import Event, Status
from outbox_core.email_payload import EmailPayload
from outbox_core.errors import (
    ConfigurationError,
    IllegalTransition,
    InvalidMessage,
    InvalidPayload,
    InvalidRecipient,
    OutboxError,
    RequeueRefused,
    StaleMark,
    StoreUnavailable,
    UnsafeHeader,
    WebhookVerificationError,
)
from outbox_core.mail import Attachment, OutgoingMail, build_message, validate_address
from outbox_core.messages import ClaimedRow, ClaimToken, Mark, NewMessage
from outbox_core.outcomes import Outcome, OutcomeKind
from outbox_core.payload import validate_payload
from outbox_core.scrub import DEFAULT_SECRET_KEYS, ScrubRules
from outbox_core.signing import WebhookSecret, webhook_headers
from outbox_core.timing import (
    DEFAULT_EMAIL_TIMING,
    DEFAULT_WEBHOOK_TIMING,
    EmailStepBudgets,
    EmailTiming,
    FanOutTiming,
    LaneTiming,
    RelayTiming,
    WebhookTiming,
)
from outbox_core.tls import SmtpSecurityPolicy, SmtpTlsMode

__all__ = [
    "CONSUMER_BACKOFF",
    "DEFAULT_EMAIL_TIMING",
    "DEFAULT_SECRET_KEYS",
    "DEFAULT_WEBHOOK_TIMING",
    "EMAIL_BACKOFF",
    "WEBHOOK_BACKOFF",
    "Attachment",
    "ClaimToken",
    "ClaimedRow",
    "ConfigurationError",
    "EmailPayload",
    "EmailStepBudgets",
    "EmailTiming",
    "Event",
    "ExponentialBackoff",
    "FanOutTiming",
    "HttpAttempt",
    "HttpFailure",
    "IllegalTransition",
    "InvalidMessage",
    "InvalidPayload",
    "InvalidRecipient",
    "LaneTiming",
    "Mark",
    "NewMessage",
    "OutboxError",
    "Outcome",
    "OutcomeKind",
    "OutgoingMail",
    "RelayTiming",
    "RequeueRefused",
    "ScrubRules",
    "SlotSchedule",
    "SmtpSecurityPolicy",
    "SmtpStage",
    "SmtpTlsMode",
    "StaleMark",
    "Status",
    "StoreUnavailable",
    "UnsafeHeader",
    "WebhookSecret",
    "WebhookTiming",
    "WebhookVerificationError",
    "build_message",
    "classify_http",
    "classify_smtp_failure",
    "classify_smtp_reply",
    "decide",
    "validate_address",
    "validate_payload",
    "webhook_headers",
]
