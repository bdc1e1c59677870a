"""``bus status`` counts what each endpoint's mode keeps, after real processing."""

from __future__ import annotations

from shared.bus.app import Mode
from shared.cli.records import count_records, describe
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import (
    Harness,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.conftest import Backend, unique_name

EXPECTED: dict[str, tuple[dict[str, int], str]] = {
    "token": ({"outbox_claimed": 0, "outbox_committed": 1}, "outbox: 0 open, 1 committed"),
    "entity_outbox": (
        {"outbox_undispatched": 0, "outbox_entries": 1},
        "outbox map: 0 undispatched, 1 entries",
    ),
    "processed_messages": ({"processed_rows": 1}, "processed rows: 1"),
    "state_based": ({"indexed_messages": 1}, "message index: 1"),
}


async def test_status_counts_the_records_the_endpoints_mode_keeps(
    backend: Backend, mode: Mode
) -> None:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(
        backend, build_flow(names, publish=False, charge=False, mode=mode)
    )
    endpoint = harness.app.endpoints[names.orders]
    empty = {k: 0 for k in EXPECTED[mode][0]}
    assert await count_records(endpoint, harness.rows(names.orders)) == empty

    await harness.setup_bus.client().send(
        PlaceOrder(order_id="o1", amount=10), to=names.orders, idempotency_key="o1"
    )
    await harness.run_until_quiet()

    counts = await count_records(endpoint, harness.rows(names.orders))
    assert (counts, describe(counts)) == EXPECTED[mode]
