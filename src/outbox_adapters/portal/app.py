"""The portal's routes: each one asks the host who the tenant is, then runs ONE operation of
:class:`~outbox_adapters.postgres.webhooks.tenants.AsyncTenantWebhooks` for that tenant, in a
transaction of its own on a connection of the pool (see the package docstring for the routes)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route, Router

from outbox_adapters.browser import BrowserGuard
from outbox_adapters.http import DestinationGuard
from outbox_adapters.portal import bodies
from outbox_adapters.portal.bodies import BadRequest
from outbox_adapters.portal.views import (
    NO_STORE,
    ShowData,
    answer_of,
    delivery_view,
    endpoint_view,
    error,
    refusal,
)
from outbox_adapters.postgres.webhooks.tenants import AsyncTenantWebhooks
from outbox_adapters.webhook_scope import check_tenant
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.ports import Encryptor

__all__ = ["EndpointPortal", "TenantOf"]

#: The host's answer to "which customer is this": the request in, the tenant id out (``None``:
#: 401). A plain function or a coroutine function; the portal's only source of the tenant.
TenantOf = Callable[[Request], Awaitable[str | None] | str | None]

_HERE: Final = Path(__file__).parent
_PAGE: Final = (_HERE / "page.html").read_text(encoding="utf-8")
_SCRIPT: Final = (_HERE / "page.js").read_text(encoding="utf-8")
#: The page's own policy: its script and styles only, no form posts, never framed.
_PAGE_POLICY: Final = (
    "default-src 'self'; style-src 'self' 'unsafe-inline'; base-uri 'none'; form-action 'none';"
    " frame-ancestors 'none'"
)
#: An operation of the tenant API on the host's connection.
_Operation = Callable[[AsyncTenantWebhooks, Any], Awaitable[Any]]


class EndpointPortal:
    """The endpoint portal of ONE tenant per request, over ``pool``; mount :attr:`app`.

    ``tenant_of(request)``: the tenant the host's authentication says this request is for
    (``None``: 401); never read from the query, the path or the body. ``guard``: the destination
    guard every registered or changed URL must pass. ``encryptor``: the keys that seal secrets at
    rest (ADR 0030), needed to reveal a sealed one. ``show_data(event_type, data)``: what the
    tenant sees of an event's data (``None``: nothing; without it, no data at all).
    ``allowed_origins``: see :class:`~outbox_adapters.browser.BrowserGuard`.
    """

    def __init__(  # noqa: PLR0913 - the host's pool and callable, then keyword-only settings
        self,
        pool: AsyncConnectionPool[Any],
        tenant_of: TenantOf,
        *,
        guard: DestinationGuard,
        encryptor: Encryptor | None = None,
        show_data: ShowData | None = None,
        allowed_origins: tuple[str, ...] = (),
    ) -> None:
        if not callable(tenant_of):
            raise TypeError("EndpointPortal needs a tenant_of(request) -> tenant id | None")
        if not isinstance(guard, DestinationGuard):
            raise TypeError(
                "EndpointPortal needs guard=DestinationGuard(...): the portal registers URLs its"
                " tenants type"
            )
        if show_data is not None and not callable(show_data):
            raise TypeError("show_data is a callable (event_type, data) -> JSON | None, or None")
        self._pool = pool
        self._tenant_of = tenant_of
        self._guard = guard
        self._encryptor = encryptor
        self._show_data = show_data
        one = "/api/endpoints/{endpoint_id}"
        router = Router(
            routes=[
                Route("/", self._page, methods=["GET"]),
                Route("/page.js", self._script, methods=["GET"]),
                Route("/api/endpoints", self._list, methods=["GET"]),
                Route("/api/endpoints", self._create, methods=["POST"]),
                Route(one, self._get, methods=["GET"]),
                Route(one, self._update, methods=["PATCH"]),
                Route(one, self._delete, methods=["DELETE"]),
                Route(f"{one}/disable", self._disable, methods=["POST"]),
                Route(f"{one}/enable", self._enable, methods=["POST"]),
                Route(f"{one}/secret", self._reveal, methods=["POST"]),
                Route(f"{one}/rotate", self._rotate, methods=["POST"]),
                Route(f"{one}/deliveries", self._deliveries, methods=["GET"]),
                Route(f"{one}/replay", self._replay, methods=["POST"]),
                Route(f"{one}/test", self._test, methods=["POST"]),
            ]
        )
        #: The ASGI app to mount: the routes behind the cross-site rule and security headers.
        self.app = BrowserGuard(router, allowed_origins=allowed_origins)

    # --- the tenant, the request, the transaction -------------------------------------------------

    async def _tenant(self, request: Request) -> str | None:
        """The host's tenant for this request, ``None`` when it names none (401)."""
        answer = await answer_of(self._tenant_of(request))
        if answer is None or answer == "":
            return None
        try:
            return check_tenant(answer)
        except InvalidMessage as exc:
            raise ConfigurationError(f"tenant_of returned {answer!r:.60}: {exc}") from None

    async def _answer(
        self,
        request: Request,
        prepare: Callable[[], Awaitable[_Operation]],
        shape: Callable[[Any], Any],
        *,
        field: str | None = None,
        status: int = 200,
    ) -> Response:
        """The tenant (401 without one), then ``prepare()`` (reads the path and body: 400, 404),
        then the operation it returns in ONE transaction on a pool connection, answered as
        ``shape(result)`` (awaited if need be) or as the tenant API's refusal; ``field``: the
        input an :class:`InvalidMessage` of the operation is about."""
        tenant = await self._tenant(request)
        if tenant is None:
            return error("not authorized", 401)
        api = AsyncTenantWebhooks(tenant, guard=self._guard, encryptor=self._encryptor)
        try:
            operation = await prepare()
            async with self._pool.connection() as conn, conn.transaction():
                result = await operation(api, conn)
            body = await answer_of(shape(result))
        except BadRequest as exc:
            return error(exc.message, exc.status, field=exc.field)
        except Exception as exc:
            refused = refusal(exc, field=field)
            if refused is None:
                raise
            return refused
        return JSONResponse(body, status_code=status, headers=NO_STORE)

    @staticmethod
    def _id(request: Request) -> int:
        """The path's endpoint id; one that can't be an id is a missing endpoint (404)."""
        text = request.path_params["endpoint_id"]
        found = bodies.path_id(text)
        if found is None:
            raise BadRequest(f"there is no webhook endpoint {text[:40]}", status=404)
        return found

    # --- the page ----------------------------------------------------------------------------------

    async def _page(self, request: Request) -> Response:
        if await self._tenant(request) is None:
            return HTMLResponse("<h1>401: not authorized</h1>", status_code=401)
        return HTMLResponse(_PAGE, headers={"content-security-policy": _PAGE_POLICY})

    async def _script(self, request: Request) -> Response:
        if await self._tenant(request) is None:
            return Response("", status_code=401)
        return Response(_SCRIPT, media_type="text/javascript")

    # --- endpoints ---------------------------------------------------------------------------------

    async def _list(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            return lambda api, conn: api.list_endpoints(conn)

        return await self._answer(
            request,
            prepare,
            lambda found: {
                "endpoints": [endpoint_view(e) for e in found],
                "shows_data": self._show_data is not None,
            },
        )

    async def _create(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            new = bodies.registration(await bodies.json_body(request))
            return lambda api, conn: api.create_endpoint(
                conn, new.url, list(new.event_types), description=new.description, scheme=new.scheme
            )

        return await self._answer(
            request,
            prepare,
            lambda made: {
                "endpoint": endpoint_view(made.endpoint),
                "verify_with": made.verify_with,
            },
            status=201,
        )

    async def _get(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            endpoint_id = self._id(request)
            return lambda api, conn: api.get_endpoint(conn, endpoint_id)

        return await self._answer(request, prepare, lambda e: {"endpoint": endpoint_view(e)})

    async def _update(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            endpoint_id = self._id(request)
            change = bodies.update(await bodies.json_body(request))
            named: dict[str, Any] = {
                name: value
                for name in ("url", "event_types", "description")
                if (value := getattr(change, name)) is not bodies.UNSET
            }
            if "event_types" in named:
                named["event_types"] = list(named["event_types"])
            return lambda api, conn: api.update_endpoint(conn, endpoint_id, **named)

        return await self._answer(request, prepare, lambda e: {"endpoint": endpoint_view(e)})

    async def _delete(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            endpoint_id = self._id(request)

            async def run(api: AsyncTenantWebhooks, conn: Any) -> int:  # noqa: ANN401
                await api.delete_endpoint(conn, endpoint_id)
                return endpoint_id

            return run

        return await self._answer(request, prepare, lambda gone: {"deleted": gone})

    async def _disable(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            endpoint_id = self._id(request)
            reason = bodies.disable_reason(await bodies.json_body(request))
            return lambda api, conn: api.disable_endpoint(conn, endpoint_id, reason)

        return await self._answer(
            request, prepare, lambda e: {"endpoint": endpoint_view(e)}, field="reason"
        )

    async def _enable(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            endpoint_id = self._id(request)
            return lambda api, conn: api.enable_endpoint(conn, endpoint_id)

        return await self._answer(
            request,
            prepare,
            lambda missed: {
                "endpoint": endpoint_view(missed.endpoint),
                "missed": list(missed.event_ids),
            },
        )

    # --- secrets -----------------------------------------------------------------------------------

    async def _reveal(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            endpoint_id = self._id(request)
            return lambda api, conn: api.reveal_secret(conn, endpoint_id)

        return await self._answer(request, prepare, lambda value: {"verify_with": value})

    async def _rotate(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            endpoint_id = self._id(request)
            overlap = bodies.overlap_of(await bodies.json_body(request))
            named = {} if overlap is None else {"overlap": overlap}
            return lambda api, conn: api.rotate_secret(conn, endpoint_id, **named)

        return await self._answer(request, prepare, lambda value: {"verify_with": value})

    # --- deliveries --------------------------------------------------------------------------------

    async def _deliveries(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            endpoint_id = self._id(request)
            wanted = bodies.delivery_query(request.query_params)
            return lambda api, conn: api.deliveries(
                conn,
                endpoint_id,
                status=wanted.status,
                limit=wanted.limit,
                before_id=wanted.before_id,
            )

        async def shape(found: list[Any]) -> dict[str, Any]:
            return {"deliveries": [await delivery_view(d, self._show_data) for d in found]}

        return await self._answer(request, prepare, shape)

    async def _replay(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            endpoint_id = self._id(request)
            event_id = bodies.replay_event(await bodies.json_body(request))
            return lambda api, conn: api.replay(conn, event_id, endpoint_id=endpoint_id)

        return await self._answer(
            request,
            prepare,
            lambda done: {
                "event_id": done.event_id,
                "replay_of": done.replay_of,
                "msg_id": done.msg_id,
                "delivery_ids": list(done.delivery_ids),
            },
            field="event_id",
        )

    async def _test(self, request: Request) -> Response:
        async def prepare() -> _Operation:
            endpoint_id = self._id(request)
            return lambda api, conn: api.send_test_event(conn, endpoint_id)

        return await self._answer(
            request,
            prepare,
            lambda sent: {
                "event_id": sent.event_id,
                "msg_id": sent.msg_id,
                "delivery_id": sent.delivery_id,
            },
        )
