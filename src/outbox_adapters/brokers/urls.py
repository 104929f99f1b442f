"""Broker URLs: which broker, where, and how to reach it safely.

=============================================================  ===================================
``nats://[USER:PASSWORD@]HOST:PORT[,HOST:PORT]``               NATS (JetStream), plaintext
``tls://[USER:PASSWORD@]HOST:PORT[,...][?ca=PATH]``            NATS over TLS (nats-py's spelling)
``kafka://HOST:PORT[,HOST:PORT]``                              Kafka, plaintext, no credentials
``kafkas://HOST:PORT[,...][?ca=PATH]``                         Kafka over TLS (``SSL``)
``kafkas://USER:PASSWORD@HOST:PORT[,...]?sasl=MECH[&ca=PATH]``  Kafka, SASL over TLS (``SASL_SSL``)
=============================================================  ===================================

TLS verifies the server's certificate and host name against the system's trust store, or only
against ``ca=PATH`` (a private certificate authority, PEM) when given; there is no way to turn the
check off. ``MECH`` is ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``. Kafka credentials are
refused without TLS (``kafka://user:pass@…``): a password never crosses the network in the clear.
Percent-escapes in the user and password are decoded (``p%40ss`` is ``p@ss``).

Every refusal is a :class:`~outbox_core.errors.ConfigurationError` naming the URL with its
password masked.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Final, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs

from outbox_core.errors import ConfigurationError

__all__ = ["SASL_MECHANISMS", "BrokerUrl", "redacted"]

_HOST: Final = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})")
#: scheme → (broker, TLS)
_SCHEMES: Final = {
    "nats": ("nats", False),
    "tls": ("nats", True),
    "kafka": ("kafka", False),
    "kafkas": ("kafka", True),
}
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_FORMS: Final = (
    "nats://HOST:PORT, tls://HOST:PORT (NATS over TLS), kafka://HOST:PORT[,HOST:PORT] or"
    " kafkas://HOST:PORT (Kafka over TLS)"
)


def redacted(url: str) -> str:
    """``url`` with the password (everything between ``//`` and ``@``) masked."""
    return re.sub(r"//[^@/]*@", "//***@", url)


@attrs.frozen
class BrokerUrl:
    """A parsed broker URL (:meth:`parse`)."""

    broker: Literal["nats", "kafka"]
    #: ``HOST:PORT`` of each server.
    addresses: tuple[str, ...]
    tls: bool = False
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    #: Kafka's SASL mechanism (only over TLS).
    sasl: str | None = None
    #: A private certificate authority (PEM) to trust instead of the system's.
    ca_file: str | None = None

    @classmethod
    def parse(cls, url: str) -> BrokerUrl:
        shown = redacted(str(url))
        try:
            parts = urlsplit(str(url))
        except ValueError:
            raise ConfigurationError(f"broker URL {shown!r} is not a URL") from None
        if parts.scheme not in _SCHEMES:
            raise ConfigurationError(f"broker URL {shown!r} must be one of {_FORMS}")
        broker, tls = _SCHEMES[parts.scheme]
        if parts.path not in ("", "/") or parts.fragment:
            raise ConfigurationError(f"broker URL {shown!r} must be SCHEME://HOST:PORT[,HOST:PORT]")
        addresses = [_address(shown, a) for a in parts.netloc.rpartition("@")[2].split(",")]
        options = _options(shown, parts.query, tls=tls, kafka=broker == "kafka")
        username = unquote(parts.username) if parts.username is not None else None
        password = unquote(parts.password) if parts.password is not None else None
        if broker == "kafka":
            _check_kafka_credentials(shown, username, password, tls=tls, sasl=options.get("sasl"))
        return cls(
            broker,  # type: ignore[arg-type]
            tuple(addresses),
            tls=tls,
            username=username,
            password=password,
            sasl=options.get("sasl"),
            ca_file=options.get("ca"),
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client's TLS context (certificate and host name checked), or ``None`` without TLS."""
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.ca_file)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def nats_servers(self) -> list[str]:
        """nats-py's server URLs, without the credentials (given to nats-py on their own: it
        would send a percent-escaped password as it is written)."""
        scheme = "tls" if self.tls else "nats"
        return [f"{scheme}://{address}" for address in self.addresses]

    def kafka_security(self) -> dict[str, object]:
        """aiokafka's connection keywords for this URL (nothing for plaintext)."""
        if not self.tls:
            return {}
        security: dict[str, object] = {
            "security_protocol": "SASL_SSL" if self.sasl else "SSL",
            "ssl_context": self.ssl_context(),
        }
        if self.sasl:
            security.update(
                sasl_mechanism=self.sasl,
                sasl_plain_username=self.username,
                sasl_plain_password=self.password,
            )
        return security


def _address(shown: str, address: str) -> str:
    match = _HOST.fullmatch(address)
    if match is None or not 0 < int(match.group(2)) < 65536:
        raise ConfigurationError(
            f"broker URL {shown!r}: {address!r} is not HOST:PORT (a port from 1 to 65535)"
        )
    return address


def _options(shown: str, query: str, *, tls: bool, kafka: bool) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigurationError(
            f"broker URL {shown!r}: its query is not NAME=VALUE pairs"
        ) from None
    known = {"ca", "sasl"} if kafka else {"ca"}
    options: dict[str, str] = {}
    for name, value in pairs:
        if name not in known or name in options:
            raise ConfigurationError(
                f"broker URL {shown!r}: unknown or repeated option {name!r} (known: "
                f"{', '.join(sorted(known))})"
            )
        options[name] = value
    if "ca" in options:
        if not tls:
            raise ConfigurationError(f"broker URL {shown!r}: ca= needs TLS (tls:// or kafkas://)")
        if not Path(options["ca"]).is_file():
            raise ConfigurationError(f"broker URL {shown!r}: ca={options['ca']!r} is not a file")
    return options


def _check_kafka_credentials(
    shown: str, username: str | None, password: str | None, *, tls: bool, sasl: str | None
) -> None:
    if (username is not None or password is not None) and not tls:
        raise ConfigurationError(
            f"broker URL {shown!r}: Kafka credentials need TLS (kafkas://USER:PASSWORD@HOST:PORT"
            "?sasl=MECH): a password is never sent in the clear"
        )
    if sasl is not None and sasl not in SASL_MECHANISMS:
        raise ConfigurationError(
            f"broker URL {shown!r}: sasl={sasl!r} is not one of {', '.join(SASL_MECHANISMS)}"
        )
    if (sasl is None) != (username is None):
        raise ConfigurationError(
            f"broker URL {shown!r}: SASL needs both USER:PASSWORD@ and sasl=MECH"
        )
