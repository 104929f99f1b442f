"""The service's HTML pages: plain server-rendered HTML, every value escaped, one script file.

The pages load nothing but ``/static/style.css`` and ``/static/feed.js`` (the Content-Security-Policy
of :mod:`.web` allows nothing else), and the script renders notification text with
``textContent``: a tenant name full of markup shows as text.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Final

__all__ = [
    "STATIC",
    "confirm_page",
    "confirmed_page",
    "dashboard_page",
    "login_page",
    "message_page",
    "signup_page",
]

STATIC: Final = Path(__file__).parent / "static"
_BELL: Final = (
    '<svg viewBox="0 0 24 24" aria-hidden="true" fill="currentColor"><path d="M12 22a2.5 2.5 0 0 0'
    " 2.45-2h-4.9A2.5 2.5 0 0 0 12 22Zm7-6V11a7 7 0 0 0-5.5-6.84V3.5a1.5 1.5 0 0 0-3 0v.66A7 7 0 0 0"
    ' 5 11v5l-2 2v1h18v-1l-2-2Z"/></svg>'
)


def _page(title: str, body: str, *, header: str = "", data: str = "") -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><link rel=stylesheet href=/static/style.css></head>"
        f"<body{data}><header><h1>Acme Cloud</h1>{header}</header><main>{body}</main></body></html>"
    )


def signup_page(*, error: str | None = None, values: dict[str, str] | None = None) -> str:
    values = values or {}

    def field(name: str, label: str, kind: str = "text") -> str:
        value = escape(values.get(name, ""), quote=True)
        return (
            f"<label for={name}>{label}</label>"
            f'<input id={name} name={name} type={kind} value="{value}" required maxlength=254>'
        )

    problem = f"<p class=error role=alert>{escape(error)}</p>" if error else ""
    return _page(
        "Sign up",
        "<div class=card><h2>Create your workspace</h2>"
        "<p class=muted>One form: your workspace, your admin account, and a welcome e-mail asking"
        " you to confirm your address.</p>"
        f"{problem}<form method=post action=/v1/signup>"
        + field("company", "Company name")
        + field("admin_name", "Your name")
        + field("admin_email", "Work e-mail", "email")
        + "<button type=submit>Create workspace</button></form></div>"
        "<p class=muted>Platform operator? <a href=/platform>Platform dashboard</a></p>",
        header="<nav><a href=/platform>Platform</a></nav>",
    )


def dashboard_page(*, title: str, who: str, note: str, poll_seconds: float) -> str:
    header = (
        f"<span class=who>{escape(who)}</span><nav>"
        f"<span class=bell title='Unread notifications'>{_BELL}<span id=badge data-unread=0"
        " class=zero>0</span></span><span id=mode data-mode=polling>connecting</span>"
        "<form method=post action=/logout><button class=secondary type=submit>Sign out</button>"
        "</form></nav>"
    )
    body = (
        f"<div class=card><div class=toolbar><h2>{escape(title)}</h2>"
        "<button id=read-all class=secondary type=button>Mark all read</button></div>"
        f"<p class=muted>{escape(note)}</p>"
        "<ul id=notifications></ul><p id=empty class=muted hidden>No notifications yet.</p></div>"
        "<script src=/static/feed.js></script>"
    )
    return _page(title, body, header=header, data=f' data-poll-seconds="{poll_seconds:g}"')


def login_page(*, error: str | None = None) -> str:
    problem = f"<p class=error role=alert>{escape(error)}</p>" if error else ""
    return _page(
        "Platform sign-in",
        "<div class=card><h2>Platform operators</h2>"
        f"{problem}<form method=post action=/platform/login>"
        "<label for=password>Operator password</label>"
        "<input id=password name=password type=password required autocomplete=current-password>"
        "<button type=submit>Sign in</button></form></div>",
    )


def confirm_page(token: str) -> str:
    # A GET never changes state (mail scanners open links); the button POSTs the token.
    return _page(
        "Confirm your address",
        "<div class=card><h2>Confirm your address</h2>"
        "<p>Confirm that this e-mail address is yours, and we'll start sending you what you"
        " asked for.</p><form method=post action=/confirm>"
        f'<input type=hidden name=token value="{escape(token, quote=True)}">'
        "<button type=submit>Confirm my address</button></form></div>",
    )


def confirmed_page(*, tenant: str, first_time: bool) -> str:
    said = "Thanks, your address is confirmed." if first_time else "Already confirmed."
    return _page(
        "Address confirmed",
        f"<div class=card><h2>{escape(said)}</h2><p>Workspace: {escape(tenant)}.</p>"
        "<p><a href=/tenant>Go to your dashboard</a></p></div>",
    )


def message_page(title: str, text: str) -> str:
    return _page(title, f"<div class=card><h2>{escape(title)}</h2><p>{escape(text)}</p></div>")
