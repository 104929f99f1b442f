"""The webhook host API's operations, each written once as a generator of statements
(:mod:`outbox_adapters.postgres.handles`): :class:`~.tenants.TenantWebhooks` runs them on a sync
handle, :class:`~.tenants.AsyncTenantWebhooks` on an async one, in the host's transaction.

Every operation is one tenant's: it reads and changes only rows whose endpoint or event has that
tenant (:mod:`.tenant_statements`), and an id of another tenant's row is refused exactly as an id
that does not exist (``there is no webhook endpoint N``), so a tenant can't even learn that it
exists. The input rules, sealing and refusals are the repository's (:mod:`outbox_adapters.webhook_model`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Final

from outbox_adapters.postgres.handles import Operation
from outbox_adapters.postgres.webhooks import statements
from outbox_adapters.postgres.webhooks import tenant_statements as sql
from outbox_adapters.postgres.webhooks.tenant_values import (
    CreatedEndpoint,
    DeliveryView,
    TestEvent,
    Unchanged,
    attempt_views,
    check_id,
)
from outbox_adapters.webhook_keys import (
    new_signing_secret,
    parse_signing_secret,
    scheme_of,
    verify_with,
)
from outbox_adapters.webhook_model import (
    DELIVERY_LANE,
    Endpoint,
    EndpointHealth,
    Missed,
    Replay,
    WebhookRefused,
    check_description,
    check_endpoint_url,
    check_event_types,
    check_max_per_second,
    check_overlap,
    check_owner,
    check_reason,
    check_replay_target,
    new_msg_id,
    receives,
    refused_disabled,
    refused_no_endpoint,
    refused_no_event,
    refused_unsubscribed,
    status_code,
)
from outbox_core.delivery import Status
from outbox_core.errors import InvalidMessage
from outbox_core.payload import decode_payload
from outbox_core.ports import Encryptor
from outbox_core.webhook_secrets import read_secret, store_secret

__all__ = [
    "MAX_PAGE",
    "TEST_EVENT_TYPE",
    "create_endpoint",
    "delete_endpoint",
    "deliveries",
    "disable_endpoint",
    "enable_endpoint",
    "get_endpoint",
    "health",
    "list_endpoints",
    "replay",
    "reveal_secret",
    "rotate_secret",
    "send_test_event",
    "update_endpoint",
]

#: The type of the event :meth:`~.tenants.AsyncTenantWebhooks.send_test_event` sends.
TEST_EVENT_TYPE: Final = "webhook.test"
#: The most deliveries one page lists.
MAX_PAGE: Final = 500


def _endpoint(tenant: str, endpoint_id: object, *, lock: bool) -> Operation[Endpoint]:
    identity = check_id(endpoint_id)
    query = sql.LOCK_TENANT_ENDPOINT if lock else sql.TENANT_ENDPOINT
    rows = yield query, {"id": identity, "tenant": tenant}
    if not rows:
        raise refused_no_endpoint(identity)
    return Endpoint.from_record(rows[0])


def _store(key_text: str, endpoint_id: int, encryptor: Encryptor | None) -> dict[str, Any]:
    secret = store_secret(
        parse_signing_secret(key_text), endpoint_id=endpoint_id, encryptor=encryptor
    )
    return {"endpoint_id": endpoint_id, "secret": secret}


def create_endpoint(  # noqa: PLR0913 - keyword-only settings of one endpoint
    tenant: str,
    url: str,
    event_types: Sequence[str],
    *,
    description: str | None,
    owner_email: str | None,
    scheme: str,
    max_per_second: int | None,
    encryptor: Encryptor | None,
) -> Operation[CreatedEndpoint]:
    key_text = new_signing_secret(scheme)
    params = {
        "tenant": tenant,
        "url": check_endpoint_url(url),
        "event_types": list(check_event_types(event_types)),
        "owner_email": check_owner(owner_email),
        "scheme": scheme_of(parse_signing_secret(key_text)),
        "max_per_second": check_max_per_second(max_per_second),
        "description": check_description(description),
    }
    rows = yield statements.INSERT_ENDPOINT, params
    endpoint = Endpoint.from_record(rows[0])
    yield statements.INSERT_SECRET, _store(key_text, endpoint.id, encryptor)
    return CreatedEndpoint(endpoint, verify_with(key_text))


def list_endpoints(tenant: str) -> Operation[list[Endpoint]]:
    rows = yield statements.ENDPOINTS, {"tenant": tenant}
    return [Endpoint.from_record(row) for row in rows]


def get_endpoint(tenant: str, endpoint_id: object) -> Operation[Endpoint]:
    return (yield from _endpoint(tenant, endpoint_id, lock=False))


def update_endpoint(  # noqa: PLR0913 - one keyword per field that may change
    tenant: str,
    endpoint_id: object,
    *,
    url: str | Unchanged,
    event_types: Sequence[str] | Unchanged,
    description: str | Unchanged | None,
    max_per_second: int | Unchanged | None,
) -> Operation[Endpoint]:
    params: dict[str, Any] = {
        "set_url": not isinstance(url, Unchanged),
        "url": None if isinstance(url, Unchanged) else check_endpoint_url(url),
        "set_event_types": not isinstance(event_types, Unchanged),
        "event_types": None
        if isinstance(event_types, Unchanged)
        else list(check_event_types(event_types)),
        "set_description": not isinstance(description, Unchanged),
        "description": None
        if isinstance(description, Unchanged)
        else check_description(description),
        "set_max_per_second": not isinstance(max_per_second, Unchanged),
        "max_per_second": None
        if isinstance(max_per_second, Unchanged)
        else check_max_per_second(max_per_second),
    }
    endpoint = yield from _endpoint(tenant, endpoint_id, lock=True)
    rows = yield sql.UPDATE_ENDPOINT, {**params, "id": endpoint.id, "tenant": tenant}
    return Endpoint.from_record(rows[0])


def disable_endpoint(tenant: str, endpoint_id: object, reason: str) -> Operation[Endpoint]:
    check_reason(reason)
    endpoint = yield from _endpoint(tenant, endpoint_id, lock=True)
    if not endpoint.enabled:
        return endpoint
    rows = yield statements.DISABLE_ENDPOINT, {"id": endpoint.id, "reason": reason, "now": None}
    return Endpoint.from_record(rows[0])


def enable_endpoint(tenant: str, endpoint_id: object) -> Operation[Missed]:
    endpoint = yield from _endpoint(tenant, endpoint_id, lock=True)
    if endpoint.enabled:
        return Missed(endpoint=endpoint, disabled_since=None, event_ids=())
    missed = yield (
        statements.MISSED_EVENTS,
        {
            "since": endpoint.disabled_at,
            "tenant": tenant,
            "event_types": list(endpoint.event_types),
            "endpoint_id": endpoint.id,
        },
    )
    rows = yield statements.ENABLE_ENDPOINT, {"id": endpoint.id}
    return Missed(
        endpoint=Endpoint.from_record(rows[0]),
        disabled_since=endpoint.disabled_at,
        event_ids=tuple(int(row["id"]) for row in missed),
    )


def rotate_secret(
    tenant: str, endpoint_id: object, *, overlap: timedelta, encryptor: Encryptor | None
) -> Operation[str]:
    check_overlap(overlap)
    endpoint = yield from _endpoint(tenant, endpoint_id, lock=True)
    key_text = new_signing_secret(endpoint.scheme)
    yield statements.EXPIRE_SECRETS, {"endpoint_id": endpoint.id, "overlap": overlap, "now": None}
    yield statements.INSERT_SECRET, _store(key_text, endpoint.id, encryptor)
    return verify_with(key_text)


def reveal_secret(
    tenant: str, endpoint_id: object, *, encryptor: Encryptor | None
) -> Operation[str]:
    endpoint = yield from _endpoint(tenant, endpoint_id, lock=False)
    rows = yield statements.LIVE_SECRETS, {"endpoint_id": endpoint.id, "now": None}
    if not rows:
        raise WebhookRefused(f"webhook endpoint {endpoint.id} has no live secret; rotate it")
    key = read_secret(
        rows[0]["secret"], endpoint_id=endpoint.id, encryptor=encryptor, scheme=endpoint.scheme
    )
    return verify_with(key.to_text())


def health(tenant: str, endpoint_id: object) -> Operation[EndpointHealth]:
    """The repository's ``endpoint_health``, for this tenant's endpoint only."""
    endpoint = yield from _endpoint(tenant, endpoint_id, lock=False)
    rows = yield statements.ENDPOINT_HEALTH, {"id": endpoint.id, "lane": DELIVERY_LANE}
    return EndpointHealth(**rows[0])


def delete_endpoint(tenant: str, endpoint_id: object) -> Operation[None]:
    endpoint = yield from _endpoint(tenant, endpoint_id, lock=True)
    yield sql.DELETE_ENDPOINT, {"id": endpoint.id, "tenant": tenant}


def deliveries(
    tenant: str, endpoint_id: object, *, status: str | None, limit: int, before_id: object
) -> Operation[list[DeliveryView]]:
    if status is not None and status not in {s.value for s in Status}:
        raise InvalidMessage(
            f"a delivery status is one of {[s.value for s in Status]}, got {status!r:.40}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidMessage(f"a page of deliveries holds 1 to {MAX_PAGE}, got {limit!r:.40}")
    before = None if before_id is None else check_id(before_id, "delivery")
    endpoint = yield from _endpoint(tenant, endpoint_id, lock=False)
    rows = yield (
        sql.DELIVERY_VIEWS,
        {
            "endpoint_id": endpoint.id,
            "tenant": tenant,
            "lane": DELIVERY_LANE,
            "status": status,
            "before_id": before,
            "limit": limit,
        },
    )
    return [_view(row) for row in rows]


def _view(row: dict[str, Any]) -> DeliveryView:
    data = decode_payload(row["data"])
    return DeliveryView(
        id=int(row["id"]),
        event_id=int(row["event_id"]),
        msg_id=row["msg_id"],
        event_type=row["event_type"],
        status=Status(row["status"]),
        attempts=int(row["attempts"]),
        last_status=status_code(row["last_status"]),
        response=row["response"],
        last_error=row["last_error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        next_attempt_at=row["next_attempt_at"],
        data=data if isinstance(data, dict) else {},
        attempts_log=attempt_views(row["attempt_log"]),
    )


def replay(tenant: str, event_id: object, *, endpoint_id: object) -> Operation[Replay]:
    """The repository's replay in one transaction (the host's): the clone, its deliveries due now
    for the delivery lane, and its completion; an interrupted replay's open clone is completed.
    To one endpoint, the endpoint must be enabled and either subscribed to the event's type or
    have had a delivery of it (a test event, a type it no longer takes)."""
    identity = check_id(event_id, "event")
    target = None if endpoint_id is None else check_id(endpoint_id)
    found = yield sql.TENANT_EVENT, {"id": identity, "tenant": tenant}
    if not found:
        raise refused_no_event(identity)
    source = found[0]
    if target is None:
        everyone = yield statements.ENDPOINTS, {"tenant": tenant}
        endpoints = [Endpoint.from_record(row) for row in everyone]
        check_replay_target(source["event_type"], tenant, None, endpoints)
    else:
        yield from _replay_target(tenant, target, identity, source["event_type"])
    scope = json.dumps({"endpoint_id": target})
    open_clones = yield statements.OPEN_REPLAY, {"replay_of": identity, "scope": scope}
    clone = open_clones[0] if open_clones else None
    if clone is None:
        made = yield (
            statements.CLONE_EVENT,
            {
                "msg_id": new_msg_id(),
                "replay_of": identity,
                "scope": scope,
            },
        )
        clone = made[0]
    if target is None:
        born = yield (
            statements.BORN_DELIVERIES,
            {
                "lane": DELIVERY_LANE,
                "event_ids": [clone["id"]],
                "event_types": [clone["event_type"]],
                "trace_contexts": [None],
                "ordering_keys": [clone["ordering_key"]],
                "tenants": [tenant],
                "endpoint_id": None,
                "birth_lease": timedelta(0),
                "token": None,
            },
        )
    else:
        born = yield (
            sql.INSERT_DUE_DELIVERY,
            {
                "lane": DELIVERY_LANE,
                "event_id": clone["id"],
                "endpoint_id": target,
                "ordering_key": clone["ordering_key"],
            },
        )
    yield statements.COMPLETE_REPLAY, {"id": clone["id"]}
    yield sql.WAKE_DELIVERIES, {"lane": DELIVERY_LANE}
    return Replay(
        event_id=int(clone["id"]),
        replay_of=identity,
        msg_id=clone["msg_id"],
        endpoint_id=target,
        delivery_ids=tuple(int(row["id"]) for row in born),
        deliveries=(),
        resumed=bool(open_clones),
    )


def _replay_target(tenant: str, target: int, event_id: int, event_type: str) -> Operation[None]:
    endpoint = yield from _endpoint(tenant, target, lock=False)
    if not endpoint.enabled:
        raise refused_disabled(endpoint.id, endpoint.disabled_reason)
    if receives(endpoint.event_types, event_type):
        return
    had = yield sql.HAD_DELIVERY, {"event_id": event_id, "endpoint_id": endpoint.id}
    if not had:
        raise refused_unsubscribed(endpoint.id, event_type)


def send_test_event(tenant: str, endpoint_id: object) -> Operation[TestEvent]:
    endpoint = yield from _endpoint(tenant, endpoint_id, lock=False)
    if not endpoint.enabled:
        raise WebhookRefused(
            f"webhook endpoint {endpoint.id} is disabled"
            f" ({endpoint.disabled_reason or 'no reason given'}); enable it first, then send a"
            " test event"
        )
    msg_id = new_msg_id()
    data = {"test": True, "endpoint_id": endpoint.id}
    made = yield (
        sql.INSERT_TEST_EVENT,
        {
            "msg_id": msg_id,
            "event_type": TEST_EVENT_TYPE,
            "data": json.dumps(data),
            "tenant": tenant,
        },
    )
    event_id = int(made[0]["id"])
    delivery = yield (
        sql.INSERT_DUE_DELIVERY,
        {
            "lane": DELIVERY_LANE,
            "event_id": event_id,
            "endpoint_id": endpoint.id,
            "ordering_key": None,
        },
    )
    yield sql.WAKE_DELIVERIES, {"lane": DELIVERY_LANE}
    return TestEvent(event_id=event_id, msg_id=msg_id, delivery_id=int(delivery[0]["id"]))
