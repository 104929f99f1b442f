"""The one redaction (outbox_core.redaction): every secret form masked, everything else kept."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest

from outbox_adapters.telemetry.logs import JsonFormatter, TextFormatter
from outbox_core.redaction import (
    MASK,
    is_payload_name,
    is_secret_name,
    redact_setting,
    redact_text,
    redact_value,
)

C = "CANARY7q"

#: (the text, what it must show): every form the module's table names.
MASKED = [
    (f"postgresql://ops:{C}@db:5432/app", "postgresql://ops:***@db:5432/app"),
    (f"postgresql://:{C}@db/app", "postgresql://:***@db/app"),
    (f"smtp://:{C}@relay:587", "smtp://:***@relay:587"),
    (f"postgresql://u:{C}@h1,h2:5433/db", "postgresql://u:***@h1,h2:5433/db"),
    (f"postgresql://u:p%40{C}@db/app", "postgresql://u:***@db/app"),
    (f"postgres://u:p@ss@{C}@db/app", "postgres://u:***@db/app"),
    (f"postgresql://u:{C}@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
    (f"amqp://guest:{C}@mq:5672/vhost", "amqp://guest:***@mq:5672/vhost"),
    (f"nats://u:{C}@a:4222,b:4222", "nats://u:***@a:4222,b:4222"),
    (f"kafkas://u:{C}@k:9093?sasl=PLAIN", "kafkas://u:***@k:9093?sasl=PLAIN"),
    (f"redis://:{C}@cache:6379/0", "redis://:***@cache:6379/0"),
    (f"postgresql://u@db/app?password={C}&sslmode=require", "?password=***&sslmode=require"),
    (f"postgresql://db/app?sslmode=require&sslpassword={C}", "&sslpassword=***"),
    (f"https://api.example/x?api_key={C}#top", "?api_key=***#top"),
    (f"host=db password='a b\\' {C}' user=x", "host=db password='***' user=x"),
    (f"host=db password={C} dbname=app", "host=db password=*** dbname=app"),
    (f"host=db password=a\\ {C} user=x", "host=db password=*** user=x"),
    (f"host=db sslpassword = {C} user=x", "host=db sslpassword = *** user=x"),
    (f'{{"password": "a\\" {C}"}}', '{"password": "***"}'),
    (f"{{'client_secret': '{C}'}}", "{'client_secret': '***'}"),
    (f"api_key: {C}", "api_key: ***"),
    (f"OUTBOX_ENCRYPTION_KEYS=k1:{C},k2:{C}", "OUTBOX_ENCRYPTION_KEYS=***"),
    (f"sasl_password={C}", "sasl_password=***"),
    (f"token={C}\\", "token=***"),
    ("password=\\", "password=***"),
    (f"Authorization: Bearer {C}xyz", "Authorization: Bearer ***"),
    (f"Authorization: Basic {C}==", "Authorization: Basic ***"),
    (f"signed with whsec_{C}+/= now", "signed with whsec_*** now"),
    (f"signed with whsk_{C}+/= now", "signed with whsk_*** now"),
]

#: Text that holds no secret and stays as it is.
KEPT = [
    "nats://user@host:4222",
    "https://host:8080/path?email=a@b.com",
    "key=order-42 token_bucket=3",
    'password authentication failed for user "ops"',
    "webhook secrets: stored in plaintext (no encryption keys)",
    "password=",
]


@pytest.mark.parametrize(("text", "shown"), MASKED)
def test_every_secret_form_is_masked(text: str, shown: str) -> None:
    out = redact_text(text)
    assert shown in out
    assert C not in out
    assert redact_text(out) == out  # masking twice changes nothing


@pytest.mark.parametrize("text", KEPT)
def test_text_without_a_secret_is_kept(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("password", True),
        ("sslpassword", True),
        ("encryption_keys", True),
        ("OUTBOX_SMTP_PASSWORD", True),
        ("client-secret", True),
        ("api-key", True),
        ("credentials", True),
        ("encryption_keys_file", False),
        ("database_url", False),
        ("idempotency_key", False),
        ("key", False),
    ],
)
def test_a_secret_name_is_recognised(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("name", "payload"),
    [("fields", True), ("data", True), ("OUTBOX_EVENT_DATA", True), ("html", True), ("to", False)],
)
def test_a_payload_name_is_recognised(name: str, payload: bool) -> None:
    assert is_payload_name(name) is payload


def test_a_value_is_redacted_item_by_item() -> None:
    assert redact_value(f"smtp://u:{C}@h") == "smtp://u:***@h"
    assert redact_value((f"password={C}", 3)) == ["password=***", 3]
    assert redact_value({"token": C, "url": f"nats://:{C}@h", "n": None}) == {
        "token": MASK,
        "url": "nats://:***@h",
        "n": None,
    }
    assert redact_value(True) is True
    assert redact_value(1.5) == 1.5
    assert redact_value(timedelta(seconds=3)) == "0:00:03"


def test_a_setting_is_masked_by_its_name_its_kind_or_its_text() -> None:
    assert redact_setting("encryption_keys", f"k1:{C}") == MASK
    assert redact_setting("fields", [f"token={C}", f"{C} plain"]) == [
        "token=***",
        MASK,
    ]
    assert redact_setting("data", f'{{"a": "{C}"}}') == MASK
    assert redact_value({"event_data": f"a={C}", "text": C}) == {
        "event_data": "a=***",
        "text": MASK,
    }
    assert redact_setting("database_url", f"host=db password={C}") == "host=db password=***"
    assert redact_setting("batch_size", 7) == 7
    unset_values: tuple[object, ...] = (None, (), [], "")
    for unset in unset_values:
        assert redact_setting("password", unset) == unset


@pytest.mark.parametrize(("text", "shown"), MASKED)
def test_both_log_formatters_mask_every_form(text: str, shown: str) -> None:
    made = logging.LogRecord(
        "outbox_adapters.x", logging.WARNING, "x.py", 1, "using %s", (text,), None
    )
    made.outbox_reason = text
    made.outbox_settings = {"password": C, "url": text}
    line = JsonFormatter().format(made)
    assert C not in line
    assert shown in json.loads(line)["message"]
    texted = TextFormatter().format(made)
    assert C not in texted
    assert texted.endswith(f"outbox_adapters.x: using {redact_text(text)}")
