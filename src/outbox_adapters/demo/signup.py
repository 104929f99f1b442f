"""The host's side of the event demo: a tenant signs up in ONE transaction.

The business write (a row in ``demo_tenant``, a table of the demo's own) and the event
(``publish_async(..., type="tenant.provisioned", key=tenant_id, source="auth")``) commit together:
the transactional outbox as a host uses it.
"""

from __future__ import annotations

import time
from typing import Final

import psycopg

from outbox_adapters.postgres.events import publish_async

__all__ = ["INSERT_TENANT", "TENANT_TABLE", "signup"]

#: The host's business table (the demo's own).
TENANT_TABLE: Final = """
CREATE TABLE IF NOT EXISTS demo_tenant (
    id text PRIMARY KEY,
    name text NOT NULL,
    admin_email text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""
INSERT_TENANT: Final = "INSERT INTO demo_tenant (id, name, admin_email) VALUES (%s, %s, %s)"


def _tenant(run: str, n: int) -> tuple[str, str, str]:
    """(tenant id, name, admin address) of signup ``n``."""
    return f"tenant-{run}-{n}", f"Acme {n}", f"admin{n}@tenant-{run}-{n}.demo.example"


async def signup(dsn: str, topic: str, run: str, n: int) -> tuple[str, str, float]:
    """ONE host transaction: the tenant's row and its event. Returns (tenant, event id, ms)."""
    tenant, name, admin = _tenant(run, n)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        began = time.perf_counter()
        async with conn.transaction():
            await conn.execute(INSERT_TENANT, (tenant, name, admin))
            made = await publish_async(
                conn,
                topic=topic,
                key=tenant,
                type="tenant.provisioned",
                source="auth",
                data={
                    "tenant_id": tenant,
                    "tenant_name": name,
                    "tenant_slug": f"acme-{n}",
                    "admin_email": admin,
                    "admin_display_name": f"Admin {n}",
                    "signup_source": "demo",
                },
            )
        committed_ms = (time.perf_counter() - began) * 1000
    return tenant, made.event.id, committed_ms
