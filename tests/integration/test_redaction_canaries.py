"""Every place a setting is shown goes through the one redaction (outbox_core.redaction): each
secret form, set through the environment with a canary in it, leaves 0 canaries in ``outbox config
show``, in ``outbox config show --json``, in the error output of a command that fails with it, and
in both log formatters (text and JSON).

The failing commands reach for servers that are not there (127.0.0.1 port 1), or are refused
before they do."""

from __future__ import annotations

import json
import logging

import pytest
from tests.support.cli import outbox

from outbox_adapters.telemetry.logs import JsonFormatter, TextFormatter

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("kafka_leftovers")]

NOWHERE = "postgresql://ops@127.0.0.1:1/outbox"
STATS = ("stats",)
RELAY = ("relay", "--drain")
WORKER = ("worker", "--drain")
ENQUEUE = ("enqueue", "email", "--to", "ann@example.org", "--subject", "s", "--text", "t")

#: (name, variable, value with ``{c}`` where the canary goes, the failing command).
FORMS = [
    ("url userinfo", "OUTBOX_DATABASE_URL", "postgresql://ops:{c}@127.0.0.1:1/outbox", STATS),
    ("url empty user", "OUTBOX_DATABASE_URL", "postgresql://:{c}@127.0.0.1:1/outbox", STATS),
    ("url ?password", "OUTBOX_DATABASE_URL", NOWHERE + "?password={c}", STATS),
    ("url sslpassword", "OUTBOX_DATABASE_URL", NOWHERE + "?sslmode=disable&sslpassword={c}", STATS),
    (
        "url several hosts",
        "OUTBOX_DATABASE_URL",
        "postgresql://ops:{c}@127.0.0.1:1,127.0.0.1:2/outbox",
        STATS,
    ),
    ("url percent-encoded", "OUTBOX_DATABASE_URL", "postgresql://ops:p%40{c}@127.0.0.1:1/x", STATS),
    ("url refused by libpq", "OUTBOX_DATABASE_URL", NOWHERE[:-7] + ":{c}@x/y?bogus=1", STATS),
    (
        "libpq quoted",
        "OUTBOX_DATABASE_URL",
        "host=127.0.0.1 port=1 user=ops password='a b\\' {c}'",
        STATS,
    ),
    ("libpq blanks", "OUTBOX_DATABASE_URL", "host=127.0.0.1 port=1 password = {c} user=o", STATS),
    ("libpq sslpassword", "OUTBOX_DATABASE_URL", "host=127.0.0.1 port=1 sslpassword={c}", STATS),
    ("nats userinfo", "OUTBOX_BROKER", "nats://u:{c}@127.0.0.1:1", RELAY),
    ("nats empty user", "OUTBOX_BROKER", "nats://:{c}@127.0.0.1:1,127.0.0.1:2", RELAY),
    ("nats ?password", "OUTBOX_BROKER", "nats://127.0.0.1:1?password={c}", RELAY),
    ("kafka sasl", "OUTBOX_BROKER", "kafkas://u:{c}@127.0.0.1:1?sasl=PLAIN", RELAY),
    ("amqp", "OUTBOX_BROKER", "amqp://guest:{c}@127.0.0.1:1/vhost", RELAY),
    ("redis", "OUTBOX_BROKER", "redis://:{c}@127.0.0.1:1/0", RELAY),
    ("smtp userinfo", "OUTBOX_SMTP_URL", "smtp://mailer:{c}@127.0.0.1:1", WORKER),
    ("smtp empty user", "OUTBOX_SMTP_URL", "smtp://:{c}@127.0.0.1:1", WORKER),
    ("encryption keys", "OUTBOX_ENCRYPTION_KEYS", "k1:{c},k2:{c}", ENQUEUE),
    ("field", "OUTBOX_ENQUEUE_FIELD", "reset_token={c}", ENQUEUE),
    (
        "event data",
        "OUTBOX_EVENT_DATA",
        '{{"card": "{c}"}}',
        ("publish", "--key", "k", "--type", "t"),
    ),
    (
        "webhook secret",
        "OUTBOX_ENDPOINT_URL",
        "http://hooks.example/in?sig=whsec_{c}",
        ("endpoints", "add", "--tenant", "acme", "--event-type", "x"),
    ),
]


@pytest.mark.parametrize(
    ("variable", "template", "failing"),
    [pytest.param(*form[1:], id=form[0]) for form in FORMS],
)
def test_no_form_of_a_secret_leaves_its_canary_anywhere(
    variable: str, template: str, failing: tuple[str, ...]
) -> None:
    canary = "Cnry" + str(abs(hash(template)) % 10**8) + "Zq"
    value = template.format(c=canary)
    env = {
        "OUTBOX_DATABASE_URL": NOWHERE,
        "OUTBOX_SENDER": "noreply@example.org",
        "OUTBOX_EVENT_DATA": "{}",
        variable: value,
    }
    shown = outbox("config", "show", env=env)
    assert shown.exit_code == 0, shown.output
    assert canary not in shown.output
    assert variable != "OUTBOX_DATABASE_URL" or "***" in shown.output
    as_json = outbox("config", "show", "--json", env=env)
    assert as_json.exit_code == 0, as_json.output
    assert canary not in as_json.output
    json.loads(as_json.stdout)

    failed = outbox(*failing, env=env)
    assert failed.exit_code in {1, 2}, failed.output
    assert "Traceback" not in failed.output
    assert canary not in failed.output + failed.stderr

    # Logged as NAME=value, and as a mapping of the settings. A payload is never logged as text
    # (docs/reliability.md): its line names the setting only.
    said = variable if variable == "OUTBOX_EVENT_DATA" else f"{variable}={value}"
    record = logging.LogRecord(
        "outbox_adapters.x", logging.ERROR, "x.py", 1, "settings: %s", (said,), None
    )
    record.outbox_settings = {variable: value, "url": value if "://" in value else None}
    for formatter in (JsonFormatter(), TextFormatter()):
        assert canary not in formatter.format(record)
