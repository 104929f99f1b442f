"""The attempt side of :class:`~.repository.WebhookRepository`: what an attempt of a delivery needs
(its endpoint's URL and state, every unexpired signing secret or key, opened and bound to its
scheme's signer, its event's stable id and exact body, the delivery's attempt log), read in one
query for one delivery or for the deliveries a fan-out round just wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from outbox_adapters.postgres.errors import mapped_outages
from outbox_adapters.postgres.webhooks import statements
from outbox_adapters.postgres.webhooks.endpoints import _all
from outbox_adapters.webhook_keys import signer_of
from outbox_adapters.webhook_model import DeliveryTarget, event_body
from outbox_core.errors import SecretUnavailable
from outbox_core.ports import Encryptor
from outbox_core.webhook_secrets import read_secret

__all__ = ["TargetReads"]


class TargetReads:
    """Delivery targets (mixed into ``WebhookRepository``)."""

    _pool: AsyncConnectionPool[Any]
    _encryptor: Encryptor | None

    @mapped_outages
    async def delivery_target(
        self, delivery_id: int, *, now: datetime | None = None
    ) -> DeliveryTarget | None:
        """What one attempt of ``delivery_id`` needs (``None``: no such delivery). ``secrets``
        holds every secret unexpired at ``now`` (default: the database's now), opened; raises
        :class:`~outbox_core.errors.SecretUnavailable` when one can't be opened."""
        records = await self._target_records([delivery_id], now)
        return self._target(records[0]) if records else None

    @mapped_outages
    async def delivery_targets(
        self, delivery_ids: Sequence[int], *, now: datetime | None = None
    ) -> dict[int, DeliveryTarget]:
        """The targets of several deliveries in one query, by delivery id (a fan-out round reads
        those of the deliveries it just wrote for their first attempts). A delivery that does not
        exist, or whose secret can't be opened, is left out: its attempt reads it again, and
        reports why."""
        targets: dict[int, DeliveryTarget] = {}
        for record in await self._target_records(delivery_ids, now):
            try:
                targets[int(record["id"])] = self._target(record)
            except SecretUnavailable:
                continue
        return targets

    async def _target_records(
        self, delivery_ids: Sequence[int], now: datetime | None
    ) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn:
            return await _all(
                conn, statements.DELIVERY_TARGET, {"ids": list(delivery_ids), "now": now}
            )

    def _target(self, record: Mapping[str, Any]) -> DeliveryTarget:
        return DeliveryTarget(
            delivery_id=record["id"],
            event_id=record["event_id"],
            endpoint_id=record["endpoint_id"],
            url=record["url"],
            enabled=record["enabled"],
            # Opened here, in the sender's process; SecretUnavailable (naming the key id) if not.
            secrets=tuple(
                signer_of(
                    read_secret(
                        s,
                        endpoint_id=record["endpoint_id"],
                        encryptor=self._encryptor,
                        scheme=record["scheme"],
                    ),
                    endpoint_id=record["endpoint_id"],
                )
                for s in record["secrets"]
            ),
            msg_id=record["msg_id"],
            event_type=record["event_type"],
            body=event_body(record["event_type"], record["created_at"], json.loads(record["data"])),
            max_per_second=record["max_per_second"],
            attempt_log=record["attempt_log"],
        )
