"""The optional extras and the one error that names the missing one.

Every technology behind an extra (psycopg, aiosmtplib, httpx, nats-py, aiokafka, Starlette, ...)
is imported only where it is used. Code that needs one calls :func:`require` first, or turns an
``ImportError`` into :class:`MissingExtra` with :func:`missing_extra`; the CLI prints the message
in one line and exits 2 (docs/reference/cli.md).
"""

from __future__ import annotations

import importlib.util
from typing import Final

from outbox_core.errors import ConfigurationError

__all__ = ["EXTRAS", "MissingExtra", "install_hint", "missing_extra", "require"]

#: The top-level modules each extra brings, in the order an error names them.
EXTRAS: Final[dict[str, tuple[str, ...]]] = {
    "postgres": ("psycopg", "psycopg_pool", "sqlalchemy"),
    "smtp": ("aiosmtplib",),
    "webhooks": ("httpx", "httpcore"),
    "nats": ("nats",),
    "kafka": ("aiokafka",),
    "feed": ("starlette",),
    "cli": ("click", "rich"),
    "crypto": ("cryptography",),
    "otel": ("opentelemetry",),
    "prometheus": ("prometheus_client",),
    "django": ("django",),
    "embedded": ("pgserver", "aiosmtpd", "trustme"),
}


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'leased-outbox[kafka]'``."""
    return f"pip install 'leased-outbox[{extra}]'"


class MissingExtra(ConfigurationError):
    """A feature was asked for whose extra is not installed; the message names the extra."""

    def __init__(self, extra: str, what: str, module: str) -> None:
        self.extra = extra
        self.module = module
        super().__init__(
            f"{what} needs the {extra!r} extra (module {module!r} is not installed):"
            f" {install_hint(extra)}"
        )


def _extra_of(module: str) -> str | None:
    top = module.partition(".")[0]
    for extra, modules in EXTRAS.items():
        if top in modules:
            return extra
    return None


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` for ``what`` unless every module of ``extra`` is importable."""
    for module in EXTRAS[extra]:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(extra, what, module)


def missing_extra(exc: ImportError, what: str) -> MissingExtra | ImportError:
    """The :class:`MissingExtra` an ``ImportError`` of an extra's module means (``exc`` itself
    when the module belongs to no extra: a broken install, not a missing extra)."""
    name = exc.name or ""
    extra = _extra_of(name)
    if extra is None:
        return exc
    return MissingExtra(extra, what, name)
