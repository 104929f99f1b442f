"""What ``outbox schema apply`` does to the rows of an earlier release, after the DDL, in the same
transaction: each step is idempotent (a second apply changes nothing).

Tenants (ADR 0017): a database made before webhook endpoints and events had a tenant gets its
existing endpoints, events and pending webhook outbox rows given ONE named tenant (``--existing-
tenant``, :data:`DEFAULT_EXISTING_TENANT` by default), then the ``tenant IS NOT NULL`` checks. So
every endpoint keeps receiving what it received before (one tenant holds them all), and a pending
event written by the earlier release still fans out.
"""

from __future__ import annotations

from typing import Final

from outbox_adapters.webhook_scope import check_tenant

__all__ = ["DEFAULT_EXISTING_TENANT", "TENANT_STEPS", "tenant_sql"]

#: The tenant an earlier release's endpoints and events are given unless the operator names one.
DEFAULT_EXISTING_TENANT: Final = "default"


def _check(table: str) -> str:
    constraint = f"ck_{table}_tenant"
    return f"""DO $$
BEGIN
    IF NOT EXISTS (
        SELECT FROM pg_constraint
        WHERE conname = '{constraint}' AND conrelid = '{table}'::regclass
    ) THEN
        ALTER TABLE {table} ADD CONSTRAINT {constraint} CHECK (tenant IS NOT NULL);
    END IF;
END
$$"""


#: (what it counts, statement): ``%(tenant)s`` is the existing rows' tenant. The UPDATEs report
#: how many rows they gave the tenant; the checks are added where missing.
TENANT_STEPS: Final = (
    ("endpoints", "UPDATE outbox_webhook_endpoint SET tenant = %(tenant)s WHERE tenant IS NULL"),
    ("events", "UPDATE outbox_webhook_event SET tenant = %(tenant)s WHERE tenant IS NULL"),
    (
        "pending webhook outbox rows",
        """UPDATE outbox_webhook
SET payload = payload || jsonb_build_object('tenant', %(tenant)s::text)
WHERE lane = 'webhooks' AND status = 'pending' AND NOT payload ? 'tenant'""",
    ),
    ("", _check("outbox_webhook_endpoint")),
    ("", _check("outbox_webhook_event")),
)


def tenant_sql(tenant: str = DEFAULT_EXISTING_TENANT) -> list[str]:
    """The steps with ``tenant`` written in as a string literal (``outbox schema sql``, a host's
    own migration tool), without a semicolon."""
    literal = "'" + check_tenant(tenant).replace("'", "''") + "'"
    return [statement.replace("%(tenant)s", literal) for _what, statement in TENANT_STEPS]
