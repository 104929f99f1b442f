"""pytest plugin: no canary token ever reaches a log record, in any test (security promise 2).

RELIABILITY.md, promise 2: "Nothing secret is logged: no payload bodies, token URLs, signatures,
webhook secrets, SMTP credentials. A canary test over the whole suite's captured logs finds none."

Loaded for the whole suite by ``tests/conftest.py`` (``pytest_plugins``). What it does:

* **Capture.** At configure time a handler is attached to the ROOT logger for the whole session. It
  turns every record it sees into text: the message with its arguments applied, the exception and
  stack text, every ``extra=`` field (a JSON log formatter prints those, so they count), and the
  line the library's own JSON formatter makes of it (``outbox --log-format json``). The
  library's loggers (``outbox_adapters``, ``outbox_core``) are set to DEBUG for the session, so no
  library record is filtered out before it reaches a handler; their old levels come back at the end.
* **Canaries.** A module-level registry: tests register the tokens they put in payloads, secrets and
  passwords (the ``log_canary`` fixture: ``log_canary.new()`` / ``log_canary.register(token)``);
  :data:`FIXED_CANARIES` holds the SMTP passwords and webhook secrets the suite uses literally; and
  every collected test module's string constants named ``CANARY`` / ``CANARY_*`` / ``*_CANARY`` are
  registered at collection, so the tokens of tests written before this plugin count too.
* **Check.** Each record is checked when it is emitted (against the canaries known then) and kept
  (up to :data:`MAX_KEPT` records) for a final check against every canary at the end.

Why a session-finish check and not a test ordered last: the check must see *every* record, and a
test, however it is ordered, runs before the teardown of session-scoped fixtures (workers stopping,
servers shutting down, pools closing log there too); a test can also be deselected (``-k``, running
one file, ``--lf``) or reordered by a plugin, and then it silently checks nothing or only part of the
run. ``pytest_sessionfinish`` runs once, after everything, whatever was selected; a leak sets the
session's exit status to 1 (so CI fails) and the terminal summary gets a ``log canary`` section that
names the test and phase (or "session"), the logger, the level, the source line and an excerpt.
``tests/security/test_log_canary.py`` proves in a subprocess that a leak fails the session.
"""

from __future__ import annotations

import logging
import secrets
import threading
import traceback
from collections.abc import Generator, Iterable
from typing import Any, Final

import attrs
import pytest

from outbox_adapters.telemetry.logs import JsonFormatter

__all__ = ["FIXED_CANARIES", "MAX_KEPT", "Canaries", "Leak", "register"]

#: Secrets the suite uses as literals (SMTP passwords, database passwords, the Standard Webhooks
#: test vector's secret). None of them may ever be logged.
FIXED_CANARIES: Final = frozenset(
    {
        "hunter2secret",  # tests/integration/test_cli.py: an SMTP password in --smtp-url
        "s3cretpw",  # tests/integration/test_cli.py: a database password in --database-url
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",  # the Standard Webhooks known-answer vector's key
        "sec-smtp-pass-7f3a9c",  # tests/security: the SMTP AUTH password of the TLS matrix
    }
)
#: Records kept for the final check (each is also checked when emitted); beyond this, only the
#: emit-time check runs. Far above what a full run logs.
MAX_KEPT: Final = 500_000
#: The loggers set to DEBUG for the session: the library's own.
LIBRARY_LOGGERS: Final = ("outbox_adapters", "outbox_core")
# Shorter canaries would match by accident (and are no secrets anyway).
_MIN_LENGTH = 6
_JSON: Final = JsonFormatter()
_STANDARD_ATTRIBUTES: Final = frozenset(
    {*vars(logging.LogRecord("", 0, "", 0, "", (), None)), "message", "asctime", "taskName"}
)


@attrs.frozen
class Leak:
    """One record that contained a canary."""

    where: str
    logger: str
    level: str
    source: str
    canary: str
    excerpt: str

    def describe(self) -> str:
        return (
            f"{self.where}: logger {self.logger!r} at {self.level} ({self.source}) logged canary"
            f" {self.canary!r}: {self.excerpt}"
        )


@attrs.frozen
class _Kept:
    where: str
    logger: str
    level: str
    source: str
    text: str


def _excerpt(text: str, canary: str) -> str:
    at = text.find(canary)
    start, end = max(0, at - 60), min(len(text), at + len(canary) + 60)
    return (
        ("..." if start else "")
        + text[start:end].replace("\n", "\\n")
        + ("..." if end < len(text) else "")
    )


def record_text(record: logging.LogRecord) -> str:
    """Everything a log line made from ``record`` could show: message, exception, stack, extras."""
    try:
        parts = [record.getMessage()]
    except Exception:  # noqa: BLE001 - a broken format string: keep its parts, check them anyway
        parts = [str(record.msg), repr(record.args)]
    if record.exc_info and record.exc_info[1] is not None:
        parts.append("".join(traceback.format_exception(*record.exc_info)))
    elif record.exc_text:
        parts.append(record.exc_text)
    if record.stack_info:
        parts.append(record.stack_info)
    parts.extend(
        f"{key}={value!r}" for key, value in vars(record).items() if key not in _STANDARD_ATTRIBUTES
    )
    # The line `outbox --log-format json` (outbox_adapters.telemetry.json_logging) would write.
    parts.append(_JSON.format(record))
    return "\n".join(parts)


class Canaries:
    """The session's canaries and every record captured so far."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: set[str] = set(FIXED_CANARIES)
        self._kept: list[_Kept] = []
        self.leaks: list[Leak] = []
        #: Records seen (kept or not).
        self.seen = 0
        #: Where records are attributed right now: a test's node id and phase, or "session".
        self.where = "session"

    # --- for tests ---------------------------------------------------------------------------

    def register(self, *tokens: str) -> None:
        """Register tokens that must never be logged (a payload secret, a password, ...)."""
        for token in tokens:
            if not isinstance(token, str) or len(token) < _MIN_LENGTH:
                raise ValueError(f"a canary is a string of at least {_MIN_LENGTH} characters")
        with self._lock:
            self._tokens.update(tokens)

    def new(self, label: str = "canary") -> str:
        """A fresh random token, registered: ``canary-3f9a...``."""
        token = f"{label}-{secrets.token_hex(10)}"
        self.register(token)
        return token

    @property
    def tokens(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._tokens)

    def mark(self) -> int:
        """A position in the captured records, for :meth:`texts` and :meth:`leaks_since`."""
        with self._lock:
            return len(self._kept)

    def texts(self, since: int = 0) -> list[tuple[str, str, str]]:
        """``(logger, level, text)`` of the records kept since ``since``."""
        with self._lock:
            return [(k.logger, k.level, k.text) for k in self._kept[since:]]

    def leaks_since(self, since: int = 0) -> list[Leak]:
        """Leaks in the records kept since ``since``, against every canary known now."""
        with self._lock:
            kept, tokens = self._kept[since:], frozenset(self._tokens)
        return list(_find(kept, tokens))

    # --- for the plugin ----------------------------------------------------------------------

    def capture(self, record: logging.LogRecord) -> None:
        text = record_text(record)
        kept = _Kept(
            where=self.where,
            logger=record.name,
            level=record.levelname,
            source=f"{record.pathname}:{record.lineno}",
            text=text,
        )
        with self._lock:
            self.seen += 1
            tokens = frozenset(self._tokens)
            if len(self._kept) < MAX_KEPT:
                self._kept.append(kept)
        self.leaks.extend(_find([kept], tokens))

    def final_check(self) -> list[Leak]:
        """Every kept record against every canary, plus what the emit-time checks found."""
        found = {(leak.where, leak.source, leak.canary, leak.excerpt): leak for leak in self.leaks}
        for leak in self.leaks_since(0):
            found.setdefault((leak.where, leak.source, leak.canary, leak.excerpt), leak)
        return list(found.values())


def _find(kept: Iterable[_Kept], tokens: frozenset[str]) -> Iterable[Leak]:
    for record in kept:
        for token in tokens:
            if token in record.text:
                yield Leak(
                    where=record.where,
                    logger=record.logger,
                    level=record.level,
                    source=record.source,
                    canary=token,
                    excerpt=_excerpt(record.text, token),
                )


#: The session's registry (one per process).
REGISTRY: Final = Canaries()


def register(*tokens: str) -> None:
    """Module-level shortcut for :meth:`Canaries.register` on the session's registry."""
    REGISTRY.register(*tokens)


class _Handler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        REGISTRY.capture(record)


_HANDLER = _Handler(level=logging.NOTSET)
_SAVED_LEVELS: dict[str, int] = {}
_LEAKS = pytest.StashKey[list[Leak]]()


# --- hooks -----------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    logging.getLogger().addHandler(_HANDLER)
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        _SAVED_LEVELS[name] = logger.level
        logger.setLevel(logging.DEBUG)
    config.stash[_LEAKS] = []


def pytest_unconfigure(config: pytest.Config) -> None:
    logging.getLogger().removeHandler(_HANDLER)
    for name, level in _SAVED_LEVELS.items():
        logging.getLogger(name).setLevel(level)
    _SAVED_LEVELS.clear()


def _module_canaries(module: Any) -> list[str]:
    names = [
        name
        for name in vars(module)
        if name == "CANARY" or name.startswith("CANARY_") or name.endswith("_CANARY")
    ]
    values = [getattr(module, name) for name in names]
    return [value for value in values if isinstance(value, str) and len(value) >= _MIN_LENGTH]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    modules = {id(item.module): item.module for item in items if isinstance(item, pytest.Function)}
    for module in modules.values():
        REGISTRY.register(*_module_canaries(module))


def _phase(item: pytest.Item, phase: str) -> Generator[None, object, object]:
    REGISTRY.where = f"{item.nodeid} ({phase})"
    try:
        return (yield)
    finally:
        REGISTRY.where = "session"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item, "teardown"))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    leaks = REGISTRY.final_check()
    session.config.stash[_LEAKS] = leaks
    if leaks and session.exitstatus in {pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED}:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    leaks = terminalreporter.config.stash.get(_LEAKS, [])
    summary = (
        f"log canary: {REGISTRY.seen} records checked against {len(REGISTRY.tokens)} canaries,"
        f" {len(leaks)} leak(s)"
    )
    if not leaks:
        terminalreporter.write_line(summary)
        return
    terminalreporter.section("log canary", sep="=", red=True, bold=True)
    terminalreporter.write_line(
        f"LOG CANARY LEAKED: {summary} (promise 2: nothing secret is logged)"
    )
    for leak in leaks:
        terminalreporter.write_line(f"  {leak.describe()}", red=True)


@pytest.fixture(scope="session")
def log_canary() -> Canaries:
    """The session's canary registry: ``log_canary.new()`` makes and registers a token."""
    return REGISTRY
