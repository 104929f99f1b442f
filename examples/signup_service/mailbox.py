"""A small web page listing what the local SMTP sink received (the local run's Mailpit).

``GET /`` shows every mail, newest first: when, from, to, subject, whether it came over TLS, and
its text with links made clickable (so the welcome's confirmation link can be followed).
``GET /api/messages`` gives the same as JSON.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from html import escape
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from outbox_adapters.demo.sink import ReceivedMail, SmtpSink

__all__ = ["mailbox_app"]

_LINK: Final = re.compile(r"https?://[^\s<>\"']+")


def _parsed(mail: ReceivedMail) -> dict[str, Any]:
    message = message_from_bytes(mail.data, policy=default_policy)
    assert isinstance(message, EmailMessage)  # noqa: S101 - the default policy's class
    body = message.get_body(preferencelist=("plain",))
    text = body.get_content() if body is not None else ""
    return {
        "from": str(message.get("From", mail.envelope_from)),
        "to": list(mail.recipients),
        "subject": str(message.get("Subject", "")),
        "date": str(message.get("Date", "")),
        "time": _clock(message),
        "tls": mail.tls,
        "text": text,
        "attachments": [part.get_filename() for part in message.iter_attachments()],
    }


def _clock(message: EmailMessage) -> str:
    """The Date header as HH:MM:SS (the page lists one run's mails)."""
    try:
        return str(message["Date"].datetime.strftime("%H:%M:%S"))
    except (AttributeError, TypeError, ValueError):
        return ""


def _linked(text: str) -> str:
    parts, last = [], 0
    for match in _LINK.finditer(text):
        parts += [escape(text[last : match.start()]), _anchor(match.group(0))]
        last = match.end()
    return "".join([*parts, escape(text[last:])])


def _anchor(url: str) -> str:
    return f'<a href="{escape(url, quote=True)}">{escape(url)}</a>'


def mailbox_app(sink: SmtpSink) -> Starlette:
    def messages() -> list[dict[str, Any]]:
        return [_parsed(mail) for mail in reversed(sink.received)]

    async def page(_request: Request) -> Response:
        rows = "".join(
            f"<tr><td>{escape(m['time'])}</td><td>{escape(m['from'])}<br>→ "
            f"{escape(', '.join(m['to']))}</td><td><strong>{escape(m['subject'])}</strong>"
            f"{' <small>(TLS)</small>' if m['tls'] else ''}<pre>{_linked(m['text'])}</pre></td></tr>"
            for m in messages()
        )
        now = datetime.now(UTC).strftime("%H:%M:%S UTC")
        return HTMLResponse(
            "<!doctype html><html lang=en><head><meta charset=utf-8><title>Local mailbox</title>"
            "<meta http-equiv=refresh content=5>"
            "<style>body{font:14px system-ui,sans-serif;margin:1.5rem;color:#1d2330}"
            "td,th{text-align:left;vertical-align:top;padding:.5rem;border-top:1px solid #dde2ea}"
            "table{border-collapse:collapse;width:100%}pre{white-space:pre-wrap;margin:.3rem 0;"
            "overflow-wrap:anywhere}small{color:#1b7a3d}"
            "</style></head><body>"
            f"<h1>Local mailbox</h1><p>{len(sink.received)} message(s) received by the SMTP sink"
            f" on 127.0.0.1:{sink.port} (refreshed {now}; TLS: arrived over STARTTLS).</p>"
            f"<table><tr><th>Time</th><th>Envelope</th><th>Message</th></tr>{rows}</table>"
            "</body></html>"
        )

    async def api(_request: Request) -> Response:
        return JSONResponse(messages())

    return Starlette(routes=[Route("/", page), Route("/api/messages", api)])
