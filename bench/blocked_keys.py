"""The event outbox's per-key claim when keys are blocked: the claim as the store runs it against
the same claim with its first guard as a probe of the key-order index per candidate.

A key is blocked while one of its pending events is not due: waiting out a retry (the broker
refused it: a topic with no stream, an outage) or leased by a relay that died. Its later events
are due but must wait, and the claim reads past them in id order to reach the other keys. Three
states, each built once, then claimed ``runs`` x 2 times, the two forms in turn, each claim in a
transaction rolled back (so every claim sees the same rows); the figure is the claim's time as the
client sees it:

- ``every_key_blocked``: N events over 1,000 keys, each key's first event waiting out a retry:
  the claim finds nothing (a broker outage, or one topic with no stream and nothing else to send);
- ``blocked_ahead_of_others``: the same, then 5,000 events of 1,000 other keys: a claim of 500;
- ``no_key_blocked``: 2,000 events over 50 keys, the first 500 leased by the batch this claim is
  made ahead of (the relay's every claim in a drain, ADR 0023): a claim of 500.

The probe-per-candidate form is the first guard as it was until 2026-12-07: the mutation matrix's
``event-claim-blocked-keys-probed-per-candidate`` (``tests/mutations/matrix.py``), not the library's.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Final

import psycopg

from bench.server import fresh_database
from bench.settings import Sizes
from bench.stats import Figure, ratio
from outbox_adapters.postgres import claim_forms, statements
from outbox_adapters.postgres.events import RELAY_LANE, outbox_event

__all__ = ["measure"]

KEYS: Final = 1_000
OTHERS: Final = 5_000
_INSERT: Final = """
INSERT INTO outbox_event (lane, payload)
SELECT %(lane)s, jsonb_build_object(
    'topic', 'bench-blocked', 'specversion', '1.0', 'id', %(prefix)s || n, 'source', 'bench',
    'type', 'tenant.provisioned', 'subject', %(prefix)s || (n %% %(keys)s),
    'time', '2026-12-07T00:00:00+00:00', 'datacontenttype', 'application/json',
    'data', '{}'::jsonb)
FROM generate_series(1, %(rows)s) AS n
"""
_HEADS_WAIT: Final = """
UPDATE outbox_event SET next_attempt_at = now() + interval '1 hour', attempts = 1
WHERE id IN (SELECT min(id) FROM outbox_event GROUP BY partition_key)
"""
_LEASED_AHEAD: Final = """
UPDATE outbox_event
SET next_attempt_at = now() + interval '70 seconds', claim_token = 'ahead', attempts = 1
WHERE id IN (SELECT id FROM outbox_event ORDER BY id LIMIT 500)
"""


def _claims() -> dict[str, str]:
    """The store's per-key claim and the probe-per-candidate one, rendered for outbox_event."""
    # The matrix imports every adapter: only this comparison pays for it, and only when it runs.
    from tests.mutations.matrix import BLOCKED_PROBED_PER_CANDIDATE  # noqa: PLC0415

    library = claim_forms.per_key_order(statements.CLAIM, "partition_key")
    probe = library.replace(
        claim_forms._KEY_NOT_BLOCKED.replace("{key}", '"partition_key"'),  # noqa: SLF001
        BLOCKED_PROBED_PER_CANDIDATE.replace("{key}", '"partition_key"'),
    )
    if probe == library:
        raise LookupError(
            "the per-key claim no longer holds its first guard as this bench knows it"
        )
    return {
        "library": statements.render(library, outbox_event),
        "probe_per_candidate": statements.render(probe, outbox_event),
    }


def _build(conn: psycopg.Connection[Any], state: str, blocked_rows: int) -> None:
    conn.execute("TRUNCATE outbox_event")
    if state == "no_key_blocked":
        conn.execute(_INSERT, {"lane": RELAY_LANE, "prefix": "k-", "keys": 50, "rows": 2_000})
        conn.execute(_LEASED_AHEAD)
    else:
        conn.execute(
            _INSERT, {"lane": RELAY_LANE, "prefix": "stuck-", "keys": KEYS, "rows": blocked_rows}
        )
        conn.execute(_HEADS_WAIT)
        if state == "blocked_ahead_of_others":
            conn.execute(
                _INSERT, {"lane": RELAY_LANE, "prefix": "go-", "keys": KEYS, "rows": OTHERS}
            )
    conn.execute("VACUUM ANALYZE outbox_event")


def _timed(conn: psycopg.Connection[Any], claim: str, params: dict[str, Any]) -> tuple[int, float]:
    with conn.transaction(force_rollback=True):
        started = time.perf_counter()
        rows = conn.execute(claim, params).fetchall()
        return len(rows), (time.perf_counter() - started) * 1000


def measure(server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    claims = _claims()
    states = ("every_key_blocked", "blocked_ahead_of_others", "no_key_blocked")
    out: dict[str, Any] = {}
    with (
        fresh_database(server_dsn, "blocked") as dsn,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        for state in states:
            _build(conn, state, sizes.blocked_rows)
            params = {
                "lane": RELAY_LANE,
                "limit": 500,
                "lease": timedelta(seconds=70),
                "token": "bench-claim",
                "now": None,
                "floor": None,
                "ahead_of": "ahead" if state == "no_key_blocked" else None,
            }
            times: dict[str, list[float]] = {name: [] for name in claims}
            found: dict[str, set[int]] = {name: set() for name in claims}
            for run in range(runs * 2):
                order = list(claims) if run % 2 == 0 else list(reversed(claims))
                for name in order:
                    count, ms = _timed(conn, claims[name], params)
                    times[name].append(ms)
                    found[name].add(count)
            if found["library"] != found["probe_per_candidate"] or len(found["library"]) != 1:
                raise RuntimeError(f"blocked keys {state}: the two claims took {found} rows")
            library = Figure.of(times["library"], "ms")
            probe = Figure.of(times["probe_per_candidate"], "ms")
            out[state] = {
                "claimed": found["library"].pop(),
                "library_claim_ms": library,
                "probe_per_candidate_claim_ms": probe,
                "probe_over_library": ratio(probe, library),
            }
            log(
                f"blocked keys {state}: library {statistics.median(times['library']):.1f} ms,"
                f" probe per candidate {statistics.median(times['probe_per_candidate']):.1f} ms"
            )
    return {
        **out,
        "blocked_rows": sizes.blocked_rows,
        "keys": KEYS,
        "note": f"{sizes.blocked_rows:,} events over {KEYS:,} keys whose first event waits out a"
        f" retry; then {OTHERS:,} events of {KEYS:,} other keys behind them; the third state:"
        " 2,000 events over 50 keys, 500 leased by the batch the claim is made ahead of."
        " Each claim of at most 500 in a transaction rolled back, the two forms in turn",
    }


_LABELS: Final = {
    "every_key_blocked": "every key blocked (nothing to claim)",
    "blocked_ahead_of_others": "blocked keys ahead of 5,000 other events",
    "no_key_blocked": "no key blocked, 500 leased ahead (a drain)",
}


def section(r: Mapping[str, Any], cell: Callable[[Mapping[str, Any], str], str]) -> list[str]:
    """The report's markdown for this comparison (``cell`` renders one figure by its path)."""
    body = [
        "| "
        + " | ".join(
            [
                label,
                cell(r, f"blocked_keys.{state}.claimed"),
                "**" + cell(r, f"blocked_keys.{state}.library_claim_ms") + "**",
                cell(r, f"blocked_keys.{state}.probe_per_candidate_claim_ms"),
                cell(r, f"blocked_keys.{state}.probe_over_library"),
            ]
        )
        + " |"
        for state, label in _LABELS.items()
    ]
    return [
        "## The relay's claim when keys are blocked",
        "",
        f"{cell(r, 'blocked_keys.note')}.",
        "",
        "| state | rows claimed | claim, ms | first guard probed per candidate, ms | probe / claim |",
        "| --- | --- | --- | --- | --- |",
        *body,
        "",
    ]
