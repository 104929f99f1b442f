"""The disable-endpoint mark (HTTP 410 Gone, ``Mark.disable_endpoint``) on every store: a store
whose rows have no endpoint refuses it before writing anything; the webhook deliveries table (and
the deliveries store of a ``MemoryWebhookRepository``) takes it as the failed mark it is, for a row
with no endpoint too (its endpoint side: tests/contract/test_webhook_repository_contract.py).
"""

from __future__ import annotations

import attrs
import pytest
from tests.support.contract import VIA, apply, claim_one

from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError
from outbox_core.messages import Mark, NewMessage
from outbox_core.ports import MarkResult


@VIA
async def test_a_disable_endpoint_mark_is_refused_where_rows_have_no_endpoint_else_it_fails_the_row(
    harness, via
):
    row_id = int((await harness.enqueue(NewMessage("email", {"to": "a@example.org"}))).row_id)
    row = await claim_one(harness, row_id)
    mark = attrs.evolve(Mark.failed(row, "HTTP 410 Gone"), disable_endpoint=True)
    if not harness.takes_endpoints:
        with pytest.raises(ConfigurationError, match="disable its webhook endpoint"):
            await apply(harness, via, mark)
        stored = await harness.store.get(row_id)
        assert stored is not None
        assert stored.status is Status.PENDING
        assert await apply(harness, via, Mark.failed(row, "plain failure")) is MarkResult.APPLIED
        return
    assert await apply(harness, via, mark) is MarkResult.APPLIED
    stored = await harness.store.get(row_id)
    assert stored is not None
    assert (stored.status, stored.last_error) == (Status.FAILED, "HTTP 410 Gone")
