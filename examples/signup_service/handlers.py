"""The service's endpoints: signup, address confirmation, sign-in, the dashboards.

``POST /v1/signup`` takes JSON (``201`` with the ids) or the page's form (``303`` to the tenant
dashboard). Its answers: ``400`` naming the field, ``409`` for a taken company name, ``413`` for a
body over 16 KiB (read no further), ``415`` for a body neither JSON nor a form, ``429`` with ``Retry-After`` past the rate limit, ``503`` when the database is
down. Neither the broker nor SMTP is on its path.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl

import psycopg
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from examples.signup_service import accounts, pages
from examples.signup_service.forms import FormError, SignupForm
from examples.signup_service.ratelimit import client_of

if TYPE_CHECKING:
    from examples.signup_service.web import Service

__all__ = ["Handlers"]

_log = logging.getLogger("examples.signup_service")
_MAX_BODY: Final = 16 * 1024


def _content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _wants_json(request: Request) -> bool:
    return _content_type(request) == "application/json"


class Handlers:
    def __init__(self, service: Service) -> None:
        self.service = service

    def _refuse(
        self,
        request: Request,
        status: int,
        error: str,
        **extra: Any,  # noqa: ANN401
    ) -> Response:
        headers = {"Retry-After": str(extra.pop("retry_after"))} if "retry_after" in extra else {}
        if _wants_json(request):
            return JSONResponse({"error": error, **extra}, status_code=status, headers=headers)
        values = extra.pop("values", None)
        return HTMLResponse(
            pages.signup_page(error=error, values=values), status_code=status, headers=headers
        )

    async def _body(self, request: Request) -> dict[str, object] | tuple[int, str]:
        """The submitted fields, or the status and the reason they can't be read. The body is read
        up to 16 KiB and no further: a client can't make the service hold more."""
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > _MAX_BODY:
                return 413, "the request body is over 16 KiB"
            chunks.append(chunk)
        raw = b"".join(chunks)
        if _wants_json(request):
            try:
                data = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                return 400, "the body is not JSON"
            return data if isinstance(data, dict) else (400, "the body must be a JSON object")
        if _content_type(request) != "application/x-www-form-urlencoded":
            return 415, "send the form (application/x-www-form-urlencoded) or JSON"
        try:
            return dict(parse_qsl(raw.decode(), keep_blank_values=True))
        except (UnicodeDecodeError, ValueError):
            return 400, "the form is not UTF-8 text"

    async def signup(self, request: Request) -> Response:  # noqa: PLR0911 - one per refusal
        service = self.service
        peer = request.client.host if request.client else None
        verdict = await service.limiter.hit(client_of(request.headers, peer))
        if not verdict.allowed:
            return self._refuse(
                request,
                429,
                "too many signups from your address; try again later",
                retry_after=verdict.retry_after,
            )
        body = await self._body(request)
        if isinstance(body, tuple):
            return self._refuse(request, *body)
        values = {k: v for k, v in body.items() if isinstance(v, str)}
        try:
            form = SignupForm.parse(body)
        except FormError as exc:
            return self._refuse(request, 400, exc.reason, field=exc.field, values=values)
        try:
            made = await accounts.signup(service.pool, form, topic=service.settings.topic)
        except accounts.SlugTaken:
            return self._refuse(
                request,
                409,
                "a workspace with that company name exists",
                field="company",
                values=values,
            )
        except psycopg.OperationalError:
            _log.exception("signup: database unavailable")
            return self._refuse(request, 503, "we can't take signups right now; try again shortly")
        request.session.clear()
        request.session.update({"tenant_id": made.tenant_id, "user_id": made.user_id})
        if _wants_json(request):
            return JSONResponse(
                {"tenant_id": made.tenant_id, "user_id": made.user_id, "event_id": made.event_id},
                status_code=201,
            )
        return RedirectResponse("/tenant", status_code=303)

    async def confirm_form(self, request: Request) -> Response:
        token = request.query_params.get("token", "")
        if self.service.links.user_of(token) is None:
            return HTMLResponse(
                pages.message_page("Link not valid", "This link is invalid or has expired."),
                status_code=400,
            )
        return HTMLResponse(pages.confirm_page(token))

    async def confirm(self, request: Request) -> Response:
        form = await request.form()
        token = form.get("token")
        user_id = self.service.links.user_of(token) if isinstance(token, str) else None
        if user_id is None:
            return HTMLResponse(
                pages.message_page("Link not valid", "This link is invalid or has expired."),
                status_code=400,
            )
        try:
            done = await accounts.confirm(
                self.service.pool, user_id, public_url=self.service.links.public_url
            )
        except LookupError:
            return HTMLResponse(
                pages.message_page("Link not valid", "No such account."), status_code=400
            )
        return HTMLResponse(
            pages.confirmed_page(tenant=done.admin.tenant_name, first_time=done.first_time)
        )

    async def tenant_dashboard(self, request: Request) -> Response:
        user_id = request.session.get("user_id")
        if not isinstance(user_id, str):
            return RedirectResponse("/", status_code=303)
        async with self.service.pool.connection() as conn:
            try:
                admin = await accounts.admin_of(conn, user_id)
            except LookupError:
                request.session.clear()
                return RedirectResponse("/", status_code=303)
        note = (
            "Your address is confirmed."
            if admin.confirmed
            else f"Check {admin.email}: we sent a link to confirm your address."
        )
        return HTMLResponse(
            pages.dashboard_page(
                title=f"{admin.tenant_name} notifications",
                who=f"{admin.display_name} · {admin.tenant_name}",
                note=note,
                poll_seconds=self.service.settings.poll_seconds,
            )
        )

    async def platform_dashboard(self, request: Request) -> Response:
        if request.session.get("operator") is not True:
            return HTMLResponse(pages.login_page())
        return HTMLResponse(
            pages.dashboard_page(
                title="Platform notifications",
                who="Platform operator",
                note="Every signup on the platform, as it happens.",
                poll_seconds=self.service.settings.poll_seconds,
            )
        )

    async def platform_login(self, request: Request) -> Response:
        form = await request.form()
        given = form.get("password")
        expected = self.service.settings.operator_password
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), expected.encode()):
            return HTMLResponse(pages.login_page(error="wrong password"), status_code=401)
        request.session.clear()
        request.session["operator"] = True
        return RedirectResponse("/platform", status_code=303)

    async def logout(self, request: Request) -> Response:
        request.session.clear()
        return RedirectResponse("/", status_code=303)

    async def home(self, _request: Request) -> Response:
        return HTMLResponse(pages.signup_page())

    async def health(self, _request: Request) -> Response:
        return JSONResponse({"ok": True})
