"""Webhook delivery over HTTP (ADR 0016): the destination guard and the httpx sender.

- :class:`DestinationGuard` — the outbound destination guard: a URL's form, and the addresses its
  host resolves to, checked against ``outbox_core.destinations`` at registration and at EVERY
  connect; connections go only to an address that was checked (no second resolution).
- :class:`HttpxWebhookSender` — ``outbox_core.ports.WebhookSender``: one keep-alive
  ``httpx.AsyncClient`` whose pool connects through the guard; no redirects, no environment
  proxies, explicit timeouts and an absolute per-attempt deadline, the response read capped.
- ``errors`` — the one mapping of httpx/httpcore/guard exceptions to outcomes.

ADR 0016 explains the choices.
"""

from outbox_adapters.http.guard import DestinationGuard, PinnedBackend, Resolver, system_resolver
from outbox_adapters.http.sender import HttpTimeouts, HttpxWebhookSender, response_snippet

__all__ = [
    "DestinationGuard",
    "HttpTimeouts",
    "HttpxWebhookSender",
    "PinnedBackend",
    "Resolver",
    "response_snippet",
    "system_resolver",
]
