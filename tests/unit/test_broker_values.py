"""The broker values and rules without a broker: StreamSpec, the DLQ conventions, broker URLs, and
the one mapping of broker client exceptions (outbox_core.brokers, outbox_adapters.brokers)."""

from __future__ import annotations

import ssl
from datetime import UTC, datetime, timedelta

import aiokafka.errors as kafka_errors
import nats.errors
import nats.js.errors
import pytest

from outbox_adapters.brokers import (
    Broker,
    BrokerUnavailable,
    BrokerUrl,
    KafkaBroker,
    NatsBroker,
    broker_from_url,
    connect_broker,
    parse_broker_url,
)
from outbox_adapters.brokers.errors import describe, operation, publish_outcome
from outbox_adapters.brokers.kafka.consumer import PartitionOffsets
from outbox_adapters.memory import MemoryBroker
from outbox_core.brokers import (
    DLQ_ATTEMPTS,
    DLQ_GROUP,
    DLQ_KIND,
    DLQ_REASON,
    DLQ_SOURCE,
    DeadLetter,
    StreamSpec,
    dlq_subject,
    park_message,
    source_of,
)
from outbox_core.errors import ConfigurationError, StoreUnavailable
from outbox_core.outcomes import OutcomeKind

# --- StreamSpec ---------------------------------------------------------------------------------


def test_a_stream_spec_defaults_to_a_week_of_retention_and_a_two_minute_window():
    spec = StreamSpec(name="platform-events", subjects=["platform-events"])
    assert spec.subjects == ("platform-events",)
    assert spec.max_age == timedelta(days=7)
    assert spec.duplicate_window == timedelta(minutes=2)
    assert spec.dlq_subjects == ("platform-events.dlq",)
    assert StreamSpec(name="a", subjects="a.b").subjects == ("a.b",)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "with.dot"}, "stream name"),
        ({"name": ""}, "stream name"),
        ({"subjects": []}, "at least one subject"),
        ({"subjects": 7}, "list of names"),
        ({"subjects": ["events.>"]}, "without wildcards"),
        ({"subjects": ["events.*"]}, "without wildcards"),
        ({"subjects": ["events.dlq"]}, "not ending in '.dlq'"),
        ({"subjects": [3]}, "dotted name"),
        ({"subjects": ["a" * 201]}, "dotted name"),
        ({"max_age": timedelta(0)}, "max_age"),
        ({"duplicate_window": 5}, "duplicate_window"),
        ({"max_age": timedelta(seconds=30)}, "must not exceed"),
        ({"partitions": 0}, "partitions"),
        ({"replicas": 6}, "replicas"),
    ],
)
def test_a_stream_spec_that_cannot_work_is_refused_naming_the_setting(changes, message):
    settings = {"name": "events", "subjects": ["events"], **changes}
    with pytest.raises(ConfigurationError, match=message):
        StreamSpec(**settings)


# --- the DLQ conventions -----------------------------------------------------------------------


def test_a_topics_dlq_is_its_name_with_dlq_appended_and_back():
    assert dlq_subject("platform-events") == "platform-events.dlq"
    assert dlq_subject("platform-events.dlq") == "platform-events.dlq"
    assert source_of("platform-events.dlq") == "platform-events"


def test_a_park_message_carries_the_plans_headers_and_a_per_group_and_kind_id():
    parked = park_message(
        source="platform-events",
        key="tenant-7",
        event_id="evt-1",
        body=b"{}",
        headers={"ce-type": "tenant.provisioned", DLQ_REASON: "stale", "OUTBOX-DLQ-KIND": "x"},
        group="notification-email",
        kind="tenant_welcome",
        reason="550 no\r\nsuch user " + "x" * 400,
        attempts=5,
    )
    assert parked.subject == "platform-events.dlq"
    assert parked.key == "tenant-7"
    assert parked.message_id == "evt-1/notification-email/tenant_welcome"
    assert parked.headers["ce-id"] == "evt-1"
    assert parked.headers["ce-type"] == "tenant.provisioned"
    assert "OUTBOX-DLQ-KIND" not in parked.headers
    assert parked.headers[DLQ_KIND] == "tenant_welcome"
    assert parked.headers[DLQ_REASON].startswith("550 no  such user")
    assert "\n" not in parked.headers[DLQ_REASON]
    assert len(parked.headers[DLQ_REASON]) == 300
    assert parked.headers[DLQ_ATTEMPTS] == "5"
    assert parked.headers[DLQ_GROUP] == "notification-email"
    assert parked.headers[DLQ_SOURCE] == "platform-events"
    bare = park_message(
        source="t.dlq", key="k", event_id="e", body=b"", headers={}, group="g", kind="",
        reason="", attempts=1,
    )  # fmt: skip
    assert (bare.headers[DLQ_KIND], bare.headers[DLQ_REASON]) == ("event", "unspecified")
    assert (bare.subject, bare.headers[DLQ_SOURCE], bare.message_id) == ("t.dlq", "t", "e/g/event")


def test_a_dead_letter_reads_its_dlq_headers():
    at = datetime(2026, 3, 1, tzinfo=UTC)
    letter = DeadLetter("e", "t.dlq", "t", {DLQ_KIND: "k", DLQ_REASON: "r", DLQ_GROUP: "g",
                                           DLQ_ATTEMPTS: "3"}, 10, at)  # fmt: skip
    assert (letter.kind, letter.reason, letter.group, letter.attempts) == ("k", "r", "g", 3)
    assert DeadLetter("e", "t.dlq", "t", {DLQ_ATTEMPTS: "x"}, 0, at).attempts is None


def test_every_broker_fits_the_broker_protocol():
    assert isinstance(MemoryBroker(), Broker)
    assert isinstance(broker_from_url("nats://127.0.0.1:4222"), Broker)
    assert isinstance(broker_from_url("kafka://127.0.0.1:9092"), Broker)


# --- broker URLs -------------------------------------------------------------------------------


async def test_a_broker_url_names_the_broker_and_its_addresses():
    assert parse_broker_url("nats://127.0.0.1:4222") == BrokerUrl("nats", ("127.0.0.1:4222",))
    assert parse_broker_url("kafka://k1:9092,k2:9093") == BrokerUrl("kafka", ("k1:9092", "k2:9093"))
    with_auth = parse_broker_url("nats://u:p%40ss@h:1")
    assert (with_auth.username, with_auth.password) == ("u", "p@ss")
    assert with_auth.nats_servers() == ["nats://h:1"]
    assert "p@ss" not in repr(with_auth)
    nats_broker = await connect_broker("nats://a:1,b:2", ack_wait=timedelta(seconds=5))
    assert isinstance(nats_broker, NatsBroker)
    assert nats_broker.servers == ["nats://a:1", "nats://b:2"]
    assert nats_broker.ack_wait == timedelta(seconds=5)
    kafka_broker = await connect_broker("kafka://[::1]:9092,k2:9093")
    assert isinstance(kafka_broker, KafkaBroker)
    assert kafka_broker.bootstrap == "[::1]:9092,k2:9093"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("amqp://h:5672", "must be one of nats://HOST:PORT, tls://HOST:PORT"),
        ("nats://h", "is not HOST:PORT"),
        ("nats://h:0", "is not HOST:PORT"),
        ("kafka://h:99999", "is not HOST:PORT"),
        ("kafka://h:1,", "is not HOST:PORT"),
        ("nats://h:1/path", "SCHEME://HOST:PORT"),
        ("nats://h:1?x=1", "unknown or repeated option 'x'"),
        ("tls://h:1?ca=/no/such/file", "is not a file"),
        ("nats://h:1?ca=/etc/hostname", "ca= needs TLS"),
        ("kafka://u:secret@h:1", "Kafka credentials need TLS"),
        ("kafkas://u:secret@h:1", "SASL needs both"),
        ("kafkas://h:1?sasl=PLAIN", "SASL needs both"),
        ("kafkas://u:secret@h:1?sasl=GSSAPI", "is not one of PLAIN"),
        ("kafkas://h:1?sasl=PLAIN&sasl=PLAIN", "unknown or repeated option 'sasl'"),
        ("kafkas://h:1?sasl", "NAME=VALUE"),
        ("http://[bad", "is not a URL"),
    ],
)
def test_a_bad_broker_url_is_a_configuration_error_naming_it_without_its_password(url, message):
    with pytest.raises(ConfigurationError, match=message) as caught:
        parse_broker_url(url)
    assert "secret" not in str(caught.value)


# --- the one error mapping ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "kind", "maybe"),
    [
        (nats.js.errors.NoStreamResponseError(), OutcomeKind.TRANSIENT, False),
        (kafka_errors.UnknownTopicOrPartitionError(), OutcomeKind.TRANSIENT, False),
        (kafka_errors.MessageSizeTooLargeError(), OutcomeKind.PERMANENT, False),
        (nats.errors.MaxPayloadError(), OutcomeKind.PERMANENT, False),
        (kafka_errors.KafkaTimeoutError(), OutcomeKind.TRANSIENT, True),
        (nats.errors.TimeoutError(), OutcomeKind.TRANSIENT, True),
        (TimeoutError(), OutcomeKind.TRANSIENT, True),
        (nats.js.errors.APIError(code=503, description="down", err_code=10039), OutcomeKind.TRANSIENT, False),
        (kafka_errors.KafkaConnectionError("refused"), OutcomeKind.TRANSIENT, False),
        (nats.errors.NoServersError(), OutcomeKind.TRANSIENT, False),
        (ConnectionRefusedError(111, "refused"), OutcomeKind.TRANSIENT, False),
    ],
)  # fmt: skip
def test_every_broker_error_of_a_publish_is_an_outcome(exc, kind, maybe):
    outcome = publish_outcome(exc, "platform-events")
    assert outcome is not None
    assert (outcome.kind, outcome.maybe_delivered) == (kind, maybe)
    assert outcome.reason


def test_a_timeout_while_still_connecting_cannot_have_delivered_anything():
    outcome = publish_outcome(TimeoutError(), "t", sending=False)
    assert outcome is not None
    assert (outcome.kind, outcome.maybe_delivered) == (OutcomeKind.TRANSIENT, False)
    assert "no connection in time" in outcome.reason


def test_a_bug_is_not_mapped_and_descriptions_are_short():
    assert publish_outcome(KeyError("x"), "t") is None
    assert describe(ValueError()) == "ValueError"
    assert describe(ValueError("x " * 300)).endswith("…")
    assert describe(nats.js.errors.APIError(code=400, description="bad", err_code=10058)) == (
        "JetStream error 10058: bad"
    )


async def test_an_operations_broker_error_is_broker_unavailable_a_store_outage():
    with pytest.raises(BrokerUnavailable, match=r"listing t\.dlq failed: NoServersError") as caught:
        async with operation("listing t.dlq"):
            raise nats.errors.NoServersError
    assert isinstance(caught.value, StoreUnavailable)
    with pytest.raises(BrokerUnavailable, match=r"^as is$"):
        async with operation("x"):
            raise BrokerUnavailable("as is")
    with pytest.raises(KeyError):
        async with operation("x"):
            raise KeyError("a bug")


# --- Kafka's contiguous commits -----------------------------------------------------------------


def front(offsets: PartitionOffsets) -> int | None:
    return offsets.committable


def test_a_kafka_offset_is_committed_only_over_an_unbroken_run_of_acks():
    offsets = PartitionOffsets()
    for offset in (10, 11, 13, 14):  # 12 was compacted away: never handed out
        offsets.handed_out(offset)
    assert not offsets.ack(11)  # 10 is not acked: nothing may be committed
    assert front(offsets) is None
    assert not offsets.ack(99)  # not handed out (a revoked partition's): ignored
    assert offsets.ack(10)
    assert offsets.committable == 12
    assert offsets.ack(13)
    assert offsets.committable == 14
    assert len(offsets) == 1
    assert offsets.ack(14)
    assert (offsets.committable, len(offsets)) == (15, 0)


def test_tls_urls_give_verified_contexts_and_kafkas_the_aiokafka_security_keywords():
    """What each TLS URL hands the client libraries (the NATS TLS path is proven against a real
    nats-server in tests/integration/test_broker_tls.py; Kafka's against a broker only when
    OUTBOX_TEST_KAFKA names one, since librdkafka's mock cluster speaks no TLS)."""
    nats_tls = BrokerUrl.parse("tls://u:p@n1:4222,n2:4222")
    assert nats_tls.nats_servers() == ["tls://n1:4222", "tls://n2:4222"]
    context = nats_tls.ssl_context()
    assert context is not None
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    assert BrokerUrl.parse("nats://n:1").ssl_context() is None
    assert BrokerUrl.parse("kafka://k:9092").kafka_security() == {}
    plain_tls = BrokerUrl.parse("kafkas://k:9093").kafka_security()
    assert plain_tls["security_protocol"] == "SSL"
    assert isinstance(plain_tls["ssl_context"], ssl.SSLContext)
    sasl = BrokerUrl.parse("kafkas://svc:s%3Acret@k:9093?sasl=SCRAM-SHA-512").kafka_security()
    assert {k: v for k, v in sasl.items() if k != "ssl_context"} == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "svc",
        "sasl_plain_password": "s:cret",
    }
    kafka = broker_from_url("kafkas://svc:pw@k:9093?sasl=PLAIN")
    assert isinstance(kafka, KafkaBroker)
    assert kafka.security["security_protocol"] == "SASL_SSL"
    nats_broker = broker_from_url("tls://n:4222")
    assert isinstance(nats_broker, NatsBroker)
    assert nats_broker.tls is not None
