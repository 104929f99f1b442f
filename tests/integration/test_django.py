"""The Django integration on a real database: enqueue and publish inside ``transaction.atomic()``
(committed with the block, rolled back with it, refused outside it), and ``manage.py outbox``
running the worker on Django's database, from ``call_command`` and from a real ``manage.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import django
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections, transaction
from psycopg.conninfo import conninfo_to_dict
from tests.support.postgres import query, scratch_database

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.django import enqueue, publish
from outbox_adapters.lanes.email import email_message
from outbox_adapters.postgres import TransactionRequired, schema

pytestmark = pytest.mark.integration


def _databases(dsn: str) -> dict[str, dict[str, str]]:
    params = conninfo_to_dict(dsn)
    return {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": str(params["dbname"]),
            "HOST": str(params.get("host", "")),
            "PORT": str(params.get("port", "")),
            "USER": str(params.get("user", "")),
            "PASSWORD": str(params.get("password", "")),
        }
    }


@pytest.fixture(scope="module")
def django_dsn(postgres_server: str) -> Iterator[str]:
    with scratch_database(postgres_server, "django") as dsn:
        schema.apply(dsn)
        if not settings.configured:  # one configuration per process: this module's
            settings.configure(
                DATABASES=_databases(dsn),
                INSTALLED_APPS=["outbox_adapters.django"],
                USE_TZ=True,
                LOGGING_CONFIG=None,  # leave the test session's logging (and its canary) alone
            )
            django.setup()
        try:
            yield dsn
        finally:
            connections.close_all()


def message(lane: str, to: str = "ann@example.org"):
    return email_message(to=to, subject="Hi", text="Hello $name", fields={"name": "Ann"}, lane=lane)


def test_enqueue_commits_and_rolls_back_with_the_atomic_block(django_dsn: str, lane: str) -> None:
    with transaction.atomic():
        first = enqueue(message(lane))  # the block's first statement
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")  # the host's own work first
        enqueue(message(lane, "bob@example.org"))

    def failing_block() -> None:
        with transaction.atomic():
            enqueue(message(lane, "gone@example.org"))
            raise RuntimeError("the host's transaction fails")

    with pytest.raises(RuntimeError):
        failing_block()
    rows = query(
        django_dsn, "SELECT payload->>'to' FROM outbox_message WHERE lane = %s ORDER BY id", lane
    )
    assert rows == [("ann@example.org",), ("bob@example.org",)]
    assert first.created


def test_outside_atomic_nothing_is_written(django_dsn: str, lane: str) -> None:
    with pytest.raises(TransactionRequired, match=r"transaction\.atomic"):
        enqueue(message(lane))
    assert query(django_dsn, "SELECT count(*) FROM outbox_message WHERE lane = %s", lane) == [(0,)]


def test_publish_writes_the_event_with_the_block(django_dsn: str) -> None:
    with transaction.atomic():
        made = publish(topic="django-events", key="k1", type="thing.done", data={"n": 1})
    found = query(
        django_dsn, "SELECT event_type FROM outbox_event WHERE event_id = %s", made.event.id
    )
    assert found == [("thing.done",)]


def test_the_management_command_runs_the_worker_on_djangos_database(
    django_dsn: str, lane: str, sink: SmtpSink
) -> None:
    with transaction.atomic():
        enqueue(message(lane))
    call_command(
        "outbox", "--", "worker", "--lane", lane, "--drain", "--no-leader",
        "--smtp-url", f"smtp://{sink.host}:{sink.port}", "--smtp-ca-file", str(sink.ca_file),
        "--sender", "noreply@example.org",
    )  # fmt: skip
    assert [r for mail in sink.received for r in mail.recipients] == ["ann@example.org"]
    status = query(django_dsn, "SELECT status FROM outbox_message WHERE lane = %s", lane)
    assert status == [("dispatched",)]


def test_manage_py_outbox_passes_the_clis_exit_codes(django_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "proj_settings.py").write_text(
        "import json, os\n"
        "DATABASES = json.loads(os.environ['TEST_DATABASES'])\n"
        "INSTALLED_APPS = ['outbox_adapters.django']\n"
        "USE_TZ = True\n"
        "SECRET_KEY = 'test'\n"
    )
    (tmp_path / "manage.py").write_text(
        "import sys\nfrom django.core.management import execute_from_command_line\n"
        "execute_from_command_line(sys.argv)\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "proj_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
        "TEST_DATABASES": json.dumps(_databases(django_dsn)),
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 - our own interpreter and script
            [sys.executable, "manage.py", "outbox", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    # A group's subcommand gets Django's database too; a command that takes none gets nothing.
    verified = manage("schema", "verify")
    assert verified.returncode == 0, verified.stderr
    assert "schema OK" in verified.stdout
    printed = manage("schema", "sql")
    assert printed.returncode == 0, printed.stderr
    assert "CREATE TABLE IF NOT EXISTS outbox_message" in printed.stdout
    pruned = manage("prune", "--older-than", "3650d", "--only", "events", "--json")
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(pruned.stdout)["removed"] == {"events": 0}
    bad = manage("prune", "--older-than", "soon")
    assert bad.returncode == 2, bad.stderr
    assert "--older-than" in bad.stderr
