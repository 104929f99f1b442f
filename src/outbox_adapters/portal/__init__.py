"""The endpoint portal: one customer (tenant) manages its own webhook endpoints in the browser, as
an ASGI app a host mounts behind its own authentication (docs/guides/webhooks.md "Portal",
ADR 0026).

::

    portal = EndpointPortal(pool, tenant_of, guard=DestinationGuard())
    app = Starlette(routes=[Mount("/settings/webhooks", portal.app)])   # behind the host's login

``tenant_of(request)`` answers which tenant the signed-in user acts for (``None``: 401). It is the
ONLY source of the tenant: no query parameter, path segment, header or body field is read for it.
Every operation is one call of
:class:`~outbox_adapters.postgres.webhooks.tenants.AsyncTenantWebhooks` for that tenant, in a
transaction of its own on a connection of ``pool``; another tenant's endpoint or event is refused
exactly as a missing one is (404, the same sentence).

==============================================  ==================================================
``GET    /``                                    the page
``GET    /api/endpoints``                       ``{"endpoints": [...], "shows_data": bool}``
``POST   /api/endpoints``                       ``{"url", "event_types", "description",
                                                "scheme"}`` → 201 ``{"endpoint", "verify_with"}``
``GET    /api/endpoints/{id}``                  ``{"endpoint"}``
``PATCH  /api/endpoints/{id}``                  any of ``url``, ``event_types``, ``description``
``DELETE /api/endpoints/{id}``                  ``{"deleted": id}``
``POST   /api/endpoints/{id}/disable``          ``{"reason"}`` → ``{"endpoint"}``
``POST   /api/endpoints/{id}/enable``           ``{"endpoint", "missed": [event ids]}``
``POST   /api/endpoints/{id}/secret``           ``{"verify_with"}``: the newest live ``whsec_``
                                                secret (``whpk_`` public key for ``v1a``)
``POST   /api/endpoints/{id}/rotate``           ``{"overlap_hours"}`` (optional) →
                                                ``{"verify_with"}``: the new one
``GET    /api/endpoints/{id}/deliveries``       ``?status=&limit=&before_id=`` →
                                                ``{"deliveries": [...]}``, newest first
``POST   /api/endpoints/{id}/replay``           ``{"event_id"}`` → the replay (due deliveries
                                                for the retry lane)
``POST   /api/endpoints/{id}/test``             a ``webhook.test`` event to this endpoint only
==============================================  ==================================================

A delivery shows its status, attempts, the last status code and the stored response snippet;
its event's data only when the host passes ``show_data(event_type, data)`` and that answers
something other than ``None``. A secret is in the answer of the reveal and the rotation only
(``Cache-Control: no-store``, as every answer), and the portal never logs it.

The app is a :class:`~outbox_adapters.browser.BrowserGuard`: a state-changing request from another
origin is a 403, a body other than JSON a 415, and every response forbids framing and sniffing. A
bad body is a 400 whose ``error`` names the field (and ``field`` is its name).
"""

from outbox_adapters.portal.app import EndpointPortal, TenantOf
from outbox_adapters.portal.views import ShowData

__all__ = ["EndpointPortal", "ShowData", "TenantOf"]
