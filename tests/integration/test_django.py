"""The Django integration on a real database: enqueue and publish inside ``transaction.atomic()``
(committed with the block, rolled back with it, refused outside it), their async twins in an async
view (``aatomic``), the app's label, and ``manage.py outbox`` running the worker on Django's
database, from ``call_command`` and from a real ``manage.py``, with the ``DATABASES`` entry's
``OPTIONS``: ``sslmode=verify-full`` against a TLS server of its own (a throwaway CA), a
``search_path``."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import django
import psycopg
import pytest
import trustme
from asgiref.sync import sync_to_async
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, override_settings
from django.urls import path
from psycopg.conninfo import conninfo_to_dict
from tests.support.postgres import query, scratch_database

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.django import (
    aatomic,
    aenqueue,
    apublish,
    conninfo_from_settings,
    enqueue,
    publish,
)
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


Manage = Callable[..., subprocess.CompletedProcess[str]]


def _project(tmp_path: Path, databases: dict[str, Any]) -> Manage:
    """A Django project in ``tmp_path`` with these ``DATABASES``; ``manage("schema", "apply")``
    runs ``python manage.py outbox schema apply`` in it."""
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
        "TEST_DATABASES": json.dumps(databases),
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 - our own interpreter and script
            [sys.executable, "manage.py", "outbox", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    return manage


def test_manage_py_outbox_passes_the_clis_exit_codes(django_dsn: str, tmp_path: Path) -> None:
    manage = _project(tmp_path, _databases(django_dsn))
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


# --- the app --------------------------------------------------------------------------------------


def test_the_app_is_labelled_leased_outbox(django_dsn: str) -> None:
    found = apps.get_app_config("leased_outbox")
    assert found.name == "outbox_adapters.django"
    assert found.verbose_name == "Leased outbox"
    assert "django" not in {config.label for config in apps.get_app_configs()}


# --- async views ----------------------------------------------------------------------------------


def _record_order(lane: str, to: str) -> None:
    """The host's own write on Django's connection (as the ORM's ``acreate`` would do it)."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO django_async_order (lane, email) VALUES (%s, %s)", [lane, to])


async def order_view(request: HttpRequest) -> HttpResponse:
    """An async view: the host's row, the message and the event in ``aatomic()``; ``?fail=1``
    fails after all three."""
    lane, to = request.GET["lane"], request.GET["to"]
    async with aatomic():
        await sync_to_async(_record_order)(lane, to)  # thread-sensitive, as Django's async ORM
        made = await aenqueue(message(lane, to))
        await apublish(topic="django-async", key=f"{lane}:{to}", type="order.placed", data={})
        if request.GET.get("fail"):
            raise RuntimeError("the view fails after writing")
    return HttpResponse(str(made.row_id))


class _Urls:
    urlpatterns: ClassVar = [path("order", order_view)]


async def test_async_view_writes_with_its_block_and_nothing_when_it_fails(
    django_dsn: str, lane: str
) -> None:
    with psycopg.connect(django_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS django_async_order (lane text, email text)")
    client = AsyncClient(raise_request_exception=True)
    with override_settings(ROOT_URLCONF=_Urls, ALLOWED_HOSTS=["testserver"]):
        ok = await client.get("/order", {"lane": lane, "to": "ann@example.org"})
        assert ok.status_code == 200
        with pytest.raises(RuntimeError, match="the view fails"):
            await client.get("/order", {"lane": lane, "to": "gone@example.org", "fail": "1"})
    rows = query(django_dsn, "SELECT id, payload->>'to' FROM outbox_message WHERE lane = %s", lane)
    assert rows == [(int(ok.content), "ann@example.org")]
    events = query(
        django_dsn,
        "SELECT partition_key FROM outbox_event WHERE topic = 'django-async'"
        " AND partition_key LIKE %s",
        f"{lane}:%",
    )
    assert events == [(f"{lane}:ann@example.org",)]
    orders = query(django_dsn, "SELECT email FROM django_async_order WHERE lane = %s", lane)
    assert orders == [("ann@example.org",)]


async def test_aenqueue_joins_the_block_and_is_refused_outside_one(
    django_dsn: str, lane: str
) -> None:
    with pytest.raises(TransactionRequired, match=r"transaction\.atomic"):
        await aenqueue(message(lane))

    async def failing_block() -> None:
        async with aatomic():
            await aenqueue(message(lane, "gone@example.org"))
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        await failing_block()
    assert query(django_dsn, "SELECT count(*) FROM outbox_message WHERE lane = %s", lane) == [(0,)]
    async with aatomic():
        made = await aenqueue(message(lane))
        # Still open: another connection sees nothing yet.
        assert query(django_dsn, "SELECT count(*) FROM outbox_message WHERE lane = %s", lane) == [
            (0,)
        ]
    found = query(django_dsn, "SELECT id FROM outbox_message WHERE lane = %s", lane)
    assert found == [(made.row_id,)]


# --- the connection string from DATABASES ---------------------------------------------------------


def test_every_libpq_option_is_passed_and_djangos_own_are_left_out() -> None:
    entry = {
        "NAME": "shop", "USER": "app", "PASSWORD": "s3cret pass", "HOST": "db.internal",
        "PORT": 6432,
        "OPTIONS": {
            "sslmode": "verify-full", "sslrootcert": "/etc/ca.pem", "connect_timeout": 5,
            "options": "-c search_path=shop", "application_name": "shop",
            "pool": {"min_size": 2}, "server_side_binding": True, "isolation_level": 3,
            "prepare_threshold": None, "assume_role": "shop owner",
        },
    }  # fmt: skip
    params = conninfo_to_dict(conninfo_from_settings(entry))
    assert params == {
        "dbname": "shop", "user": "app", "password": "s3cret pass", "host": "db.internal",
        "port": "6432", "sslmode": "verify-full", "sslrootcert": "/etc/ca.pem",
        "connect_timeout": "5", "application_name": "shop",
        "options": "-c search_path=shop -c role=shop\\ owner",
    }  # fmt: skip
    service = conninfo_to_dict(conninfo_from_settings({"NAME": "", "OPTIONS": {"service": "s"}}))
    assert service == {"service": "s"}
    assert conninfo_to_dict(conninfo_from_settings({"NAME": None, "OPTIONS": {}})) == {
        "dbname": "postgres"
    }


def test_an_option_libpq_does_not_know_is_refused_by_name_never_by_value() -> None:
    entry = {"NAME": "shop", "PASSWORD": "hunter2-secret", "OPTIONS": {"sslmod": "hunter2-secret"}}
    with pytest.raises(ImproperlyConfigured, match="'sslmod' is not a libpq") as refused:
        conninfo_from_settings(entry, alias="shop")
    assert "hunter2" not in str(refused.value)
    assert "DATABASES['shop']" in str(refused.value)
    with pytest.raises(ImproperlyConfigured, match="NAME or OPTIONS"):
        conninfo_from_settings({"NAME": "", "OPTIONS": {}})


def test_search_path_in_options_makes_schema_apply_write_to_that_schema(
    postgres_server: str, tmp_path: Path
) -> None:
    with scratch_database(postgres_server, "django_schema") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA myschema")
        databases = _databases(dsn)
        databases["default"]["OPTIONS"] = {"options": "-c search_path=myschema"}  # type: ignore[assignment]
        manage = _project(tmp_path, databases)
        applied = manage("schema", "apply")
        assert applied.returncode == 0, applied.stderr
        tables = query(
            dsn,
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'outbox_message'",
        )
        assert tables == [("myschema",)]
        verified = manage("schema", "verify")
        assert verified.returncode == 0, verified.stderr


def test_an_unknown_option_is_one_error_line_without_the_password(
    django_dsn: str, tmp_path: Path
) -> None:
    databases = _databases(django_dsn)
    databases["default"]["PASSWORD"] = "hunter2-secret"
    databases["default"]["OPTIONS"] = {"sslmod": "require"}  # type: ignore[assignment]
    refused = _project(tmp_path, databases)("schema", "verify")
    assert refused.returncode == 2
    assert refused.stderr.startswith("Error: DATABASES['default']['OPTIONS']: 'sslmod'")
    assert "Traceback" not in refused.stderr
    assert "hunter2" not in refused.stderr + refused.stdout


# --- TLS: sslmode=verify-full with a private CA ---------------------------------------------------


def _bin_dirs() -> list[Path]:
    """PostgreSQL binaries to try, newest first: the system's, then the pgserver wheel's."""

    def version(bin_dir: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in bin_dir.parent.name.split(".") if part.isdigit())

    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    pgserver = importlib.import_module("pgserver")
    found.append(Path(str(pgserver.__file__)).parent / "pginstall" / "bin")
    return [d for d in found if (d / "postgres").exists() and (d / "initdb").exists()]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _TlsPostgres:
    """A throwaway PostgreSQL server with ``ssl=on`` (a trustme CA's certificate for 127.0.0.1 and
    localhost) that accepts TCP clients over TLS only (``hostssl``), on a free port."""

    def __init__(self, bin_dir: Path, authority: trustme.CA) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="outbox-tls-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.user: str | None = None
        self.data.mkdir()
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: as pgserver's own account
            utils = importlib.import_module("pgserver.utils")
            utils.ensure_user_exists("pgserver")
            import pwd  # noqa: PLC0415 - POSIX only, and only needed as root

            entry = pwd.getpwnam("pgserver")
            utils.ensure_prefix_permissions(self.data)
            self.root.chmod(0o755)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
            self.user = "pgserver"
        self.data.chmod(0o700)
        self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres")
        issued = authority.issue_cert("127.0.0.1", "localhost")
        issued.cert_chain_pems[0].write_to_path(str(self.data / "server.crt"))
        issued.private_key_pem.write_to_path(str(self.data / "server.key"))
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n"
        )
        for name in ("server.crt", "server.key"):
            if self.user is not None:
                shutil.chown(self.data / name, self.user, self.user)
        (self.data / "server.key").chmod(0o600)
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data} -c fsync=off"
            " -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key"
        )
        log = str(self.data / "server.log")
        self._run(
            "pg_ctl", "-D", str(self.data), "-w", "-t", "30", "-o", options, "-l", log, "start"
        )

    def _run(self, tool: str, *args: str) -> None:
        with tempfile.TemporaryFile() as out:  # a file, not a pipe: the server would inherit it
            result = subprocess.run(  # noqa: S603 - our own binaries, fixed arguments
                [str(self.bin_dir / tool), *args],
                stdout=out, stderr=subprocess.STDOUT, user=self.user, timeout=60, check=False,
            )  # fmt: skip
            if result.returncode != 0:
                out.seek(0)
                log = self.data / "server.log"
                tail = log.read_text(errors="replace")[-1000:] if log.exists() else ""
                raise RuntimeError(f"{tool}: {out.read().decode(errors='replace')}{tail}")

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def tls_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, Path]]:
    """``(port, the CA that signed the server's certificate, another CA)``, as files."""
    authority, stranger = trustme.CA(), trustme.CA()
    folder = tmp_path_factory.mktemp("tls-ca")
    ca, other = folder / "ca.pem", folder / "other-ca.pem"
    authority.cert_pem.write_to_path(str(ca))
    stranger.cert_pem.write_to_path(str(other))
    failures = []
    for bin_dir in _bin_dirs():  # the pgserver wheel's binaries are built without OpenSSL
        try:
            server = _TlsPostgres(bin_dir, authority)
        except RuntimeError as exc:
            failures.append(f"{bin_dir}: {exc}")
            continue
        try:
            yield server.port, ca, other
        finally:
            server.close()
        return
    reason = "no PostgreSQL binaries with TLS support: " + " | ".join(failures or ["none found"])
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def test_sslmode_verify_full_with_a_private_ca_connects_and_a_wrong_ca_is_refused(
    tls_postgres: tuple[int, Path, Path], tmp_path: Path
) -> None:
    port, ca, other = tls_postgres

    def databases(root: Path) -> dict[str, Any]:
        return {
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "postgres", "USER": "postgres", "PASSWORD": "hunter2-secret",
                "HOST": "127.0.0.1", "PORT": str(port),
                "OPTIONS": {"sslmode": "verify-full", "sslrootcert": str(root)},
            }
        }  # fmt: skip

    (tmp_path / "good").mkdir()
    (tmp_path / "bad").mkdir()
    applied = _project(tmp_path / "good", databases(ca))("schema", "apply")
    assert applied.returncode == 0, applied.stderr
    verified = _project(tmp_path / "good", databases(ca))("schema", "verify")
    assert verified.returncode == 0, verified.stderr
    # libpq's default (sslmode=prefer) would take any certificate: verify-full refuses this one.
    refused = _project(tmp_path / "bad", databases(other))("schema", "verify")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "certificate verify failed" in refused.stderr
    assert "hunter2" not in refused.stderr + refused.stdout + applied.stdout + applied.stderr
