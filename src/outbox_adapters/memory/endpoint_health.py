"""One endpoint's health in :class:`~outbox_adapters.memory.MemoryWebhookRepository`, with the
semantics of PostgreSQL's ``endpoint_health`` (``postgres.webhooks.statements.ENDPOINT_HEALTH``;
the contract suite runs the same cases against both): its state, when its last delivery succeeded
and when its last one failed (by resolution time), and its failure streak, the failed deliveries
resolved after the last success.
"""

from __future__ import annotations

import asyncio

from outbox_adapters.memory.webhook_endpoints import MemoryEndpointOps
from outbox_adapters.webhook_model import EndpointHealth
from outbox_core.delivery import Status

__all__ = ["MemoryHealthReads"]


class MemoryHealthReads(MemoryEndpointOps):
    """``endpoint_health`` (a base of ``MemoryWebhookRepository``)."""

    async def endpoint_health(self, endpoint_id: int) -> EndpointHealth:
        """How ``endpoint_id`` is doing; :class:`WebhookRefused` for an unknown endpoint."""
        await asyncio.sleep(0)
        with self._locked("endpoint_health"):
            endpoint = self._endpoint(endpoint_id)
            resolved = [
                (row.status, row.resolved_at)
                for row, to in self._delivery_rows()
                if to == endpoint_id and row.resolved_at is not None
            ]
        successes = [at for status, at in resolved if status is Status.DISPATCHED]
        failures = [at for status, at in resolved if status is Status.FAILED]
        last_success = max(successes, default=None)
        return EndpointHealth(
            endpoint_id=endpoint.id,
            enabled=endpoint.enabled,
            disabled_reason=endpoint.disabled_reason,
            disabled_at=endpoint.disabled_at,
            last_success_at=last_success,
            last_failure_at=max(failures, default=None),
            failure_streak=sum(1 for at in failures if last_success is None or at > last_success),
        )
