"""In-memory adapters for tests: a store, a leader lease, a recording mailer and webhook sender, a
broker, the webhook repository (docs/guides/testing-your-code.md).

They are shipped for host applications' tests as much as for ours. :class:`MemoryStore` has the
semantics of :class:`outbox_adapters.postgres.store.PostgresStore`, statement for statement, and the
contract suites (``tests/contract``) run the same cases against both, so they cannot drift: the
store, the webhook repository, the mailer and the webhook sender each have one.

=====================  ==========================================================================
module                 holds
=====================  ==========================================================================
:mod:`.store`          :class:`MemoryStore`, the outbox store
:mod:`.leader`         :class:`MemoryLeaderLease`, the per-lane leader lease
:mod:`.recording`      :class:`RecordingMailer` and :class:`RecordingHandler`, peers that record
                       every call and return scripted outcomes
:mod:`.sender`         :class:`RecordingWebhookSender`, the webhook sender's peer: scripted
                       replies classified as the HTTP sender classifies them
:mod:`.broker`         :class:`MemoryBroker`, a broker's publisher and consumers in one process
:mod:`.operator`       the store's operator side (get, failed, stats, payload rewrite)
:mod:`.rows`           the stored row and the pure rules applied to it (scrub, requeue filter)
:mod:`.stamps`         the time a write is stamped with (the caller's ``now`` or the clock's)
:mod:`.channels`       :class:`MemoryRecipientRows` and :class:`MemoryParkLedger`, the consumer
                       channels' rows and parking ledger over a :class:`MemoryStore`
:mod:`.webhooks`       :class:`MemoryWebhookRepository`, ``postgres.webhooks.WebhookRepository``
                       over the webhook outbox's and the deliveries' :class:`MemoryStore` s:
                       fan-out (one row or a batch, born-leased deliveries), targets, replay;
                       the deliveries store then takes the 410 mark
:mod:`.deliveries`     the store's side as the deliveries table: rows born claimed, the 410 mark
:mod:`.webhook_endpoints`  its endpoint side: endpoints, secrets and rotation, disable/enable
                       with what was missed, the health sweep and its notice, the report;
                       :class:`WebhookEvent`, an event as the repository holds it
=====================  ==========================================================================

The value types the store answers with (:class:`StoredRow`, :class:`FailedReport`, ...) are the
core's, from :mod:`outbox_core.operator`; they are re-exported here. ``MemoryStore.available =
False`` simulates an outage: every operation raises :class:`~outbox_core.errors.StoreUnavailable`.
"""

from outbox_adapters.memory.broker import MemoryBroker, MemoryConsumer, MemoryPublisher
from outbox_adapters.memory.channels import MemoryParkLedger, MemoryRecipientRows
from outbox_adapters.memory.leader import MemoryLeaderLease
from outbox_adapters.memory.recording import (
    HandlerCall,
    MailAttempt,
    RecordingHandler,
    RecordingMailer,
    Scripted,
)
from outbox_adapters.memory.sender import (
    RecordingWebhookSender,
    SenderScripted,
    WebhookReply,
    WebhookRequest,
)
from outbox_adapters.memory.store import MemoryStore
from outbox_adapters.memory.webhooks import MemoryWebhookRepository, WebhookEvent
from outbox_adapters.store_rules import MAX_PAYLOAD_BYTES, NO_SUCH_ROW
from outbox_core.operator import (
    AuditEntry,
    ErrorGroup,
    FailedReport,
    LaneStats,
    PayloadRewrites,
    StoredRow,
    StoreStats,
)

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "NO_SUCH_ROW",
    "AuditEntry",
    "ErrorGroup",
    "FailedReport",
    "HandlerCall",
    "LaneStats",
    "MailAttempt",
    "MemoryBroker",
    "MemoryConsumer",
    "MemoryLeaderLease",
    "MemoryParkLedger",
    "MemoryPublisher",
    "MemoryRecipientRows",
    "MemoryStore",
    "MemoryWebhookRepository",
    "PayloadRewrites",
    "RecordingHandler",
    "RecordingMailer",
    "RecordingWebhookSender",
    "Scripted",
    "SenderScripted",
    "StoreStats",
    "StoredRow",
    "WebhookEvent",
    "WebhookReply",
    "WebhookRequest",
]
