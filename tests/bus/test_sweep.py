"""The outbox sweep bounds residue without ever deleting a token that was signalled."""

from __future__ import annotations

from lab.cleanup.sweep import sweep_endpoint
from shared.stores.instrumented import Fault, fault_at_first
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import Harness
from tests.conftest import Backend, unique_name


async def sweep_all(harness: Harness, grace: float = 0.0) -> tuple[int, int]:
    removed_records = removed_tokens = 0
    for endpoint in harness.app.endpoints:
        report = await sweep_endpoint(
            harness.raw,
            endpoint,
            harness.cleanup_rows()[endpoint],
            tokens_container=harness.config.tokens_container,
            grace_seconds=grace,
            clock=harness.config.clock,
        )
        removed_records += report.outbox_records_removed
        removed_tokens += report.abandoned_tokens_removed
    return removed_records, removed_tokens


async def residue(harness: Harness) -> tuple[int, int]:
    records = sum([len(await harness.outbox_records(e)) for e in harness.app.endpoints])
    return records, len(await harness.tokens())


async def test_one_sweep_after_quiescence_leaves_no_tokens_or_outbox_records(
    backend: Backend,
) -> None:
    """Crash right after a token create and lose another create's response: both leave
    tokens no one will signal. After the flow drains, one sweep removes them all."""
    for fault in (Fault.CRASH_AFTER, Fault.ERROR_AFTER):
        names = FlowNames.with_suffix(unique_name("")[:8])
        harness = await Harness.create(backend, build_flow(names, publish=False))
        await harness.setup_bus.client().send(
            PlaceOrder(order_id="o", amount=1), to=names.orders, idempotency_key="k"
        )
        harness.instrumentation.plan = fault_at_first("blob.create", fault)
        await harness.run_until_quiet()
        assert [op.kind for op, _ in harness.instrumentation.injected] == ["blob.create"]
        records, tokens = await residue(harness)
        assert (records, tokens) == (3, 1), fault

        removed_records, removed_tokens = await sweep_all(harness)

        assert (removed_records, removed_tokens) == (3, 1)
        assert await residue(harness) == (0, 0)
        assert len(await harness.applied(names.orders)) == 1


async def test_a_signalled_token_still_in_flight_is_never_swept(backend: Backend) -> None:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, publish=False))
    await harness.setup_bus.client().send(
        PlaceOrder(order_id="o", amount=1), to=names.orders, idempotency_key="k"
    )
    [message] = await harness.raw.queue(names.orders).receive()
    await harness.deliver(names.orders, message)  # orders done; ChargeCard waits in its queue
    [in_flight] = await harness.tokens()

    # O(orders) is not retired while the token it committed waits to be consumed.
    assert await sweep_all(harness) == (0, 0)

    assert await harness.tokens() == [in_flight]
    await harness.run_until_quiet()
    assert len(await harness.applied(names.shipping)) == 1
    assert await sweep_all(harness) == (3, 0)
    assert await residue(harness) == (0, 0)


async def test_nothing_younger_than_the_grace_period_is_swept(backend: Backend) -> None:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, publish=False, charge=False))
    await harness.setup_bus.client().send(
        PlaceOrder(order_id="o", amount=1), to=names.orders, idempotency_key="k"
    )
    await harness.run_until_quiet()

    assert await sweep_all(harness, grace=600) == (0, 0)
    assert await residue(harness) == (1, 0)
    if backend.clock is not None:
        backend.clock.advance(601)
        assert await sweep_all(harness, grace=600) == (1, 0)
