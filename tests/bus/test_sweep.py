"""The outbox sweep bounds residue without ever deleting a token that was signalled.

In token mode the receiver leaves its processed incoming token to the cleanup (R7,
``shared.bus.receiver``): after a flow drains, each token-mode endpoint's token is still
there, claimed by its O(m), and the sweep deletes it just before it retires O(m)."""

from __future__ import annotations

from dataclasses import dataclass

from lab.cleanup.sweep import sweep_endpoint
from shared.stores.instrumented import Fault, fault_at_first
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import Harness
from tests.conftest import Backend, unique_name


@dataclass(frozen=True)
class Swept:
    """What one sweep of every endpoint removed."""

    outbox_records: int
    abandoned_tokens: int
    incoming_tokens: int
    """Processed messages' tokens, deleted by the sweep's R7 before it retired their O(m)."""


async def sweep_all(harness: Harness, grace: float = 0.0) -> tuple[int, int]:
    """One sweep of every endpoint: the outbox records and abandoned tokens it removed."""
    swept = await sweep_counted(harness, grace)
    return swept.outbox_records, swept.abandoned_tokens


async def sweep_counted(harness: Harness, grace: float = 0.0) -> Swept:
    removed_records = removed_tokens = removed_incoming = 0
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
        removed_incoming += sum(t.removed["incoming_tokens"] for t in report.tasks)
    return Swept(removed_records, removed_tokens, removed_incoming)


async def residue(harness: Harness) -> tuple[int, int]:
    records = sum([len(await harness.outbox_records(e)) for e in harness.app.endpoints])
    return records, len(await harness.tokens())


async def test_one_sweep_after_quiescence_leaves_no_tokens_or_outbox_records(
    backend: Backend,
) -> None:
    """Crash right after a token create and lose another create's response: both leave
    tokens no one will signal. After the flow drains, one sweep removes them all, and with
    them the three processed incoming tokens the receivers left for its R7."""
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
        # The abandoned token, and orders', payments' and shipping's incoming tokens, each
        # claimed by its O(m) until the sweep's R7.
        assert (records, tokens) == (3, 4), fault
        assert len(await harness.tokens_in_flight()) == 1, fault

        swept = await sweep_counted(harness)

        assert swept == Swept(outbox_records=3, abandoned_tokens=1, incoming_tokens=3)
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
    [in_flight] = await harness.tokens_in_flight()
    [record] = await harness.outbox_records(names.orders)

    # O(orders) is not retired while the token it committed waits to be consumed, and so
    # its own incoming token (R7, the sweep's) waits with it.
    assert await sweep_counted(harness) == Swept(0, 0, 0)

    assert sorted(await harness.tokens()) == sorted([in_flight, record.incoming_token])
    await harness.run_until_quiet()
    assert len(await harness.applied(names.shipping)) == 1
    assert await sweep_counted(harness) == Swept(3, 0, 3)
    assert await residue(harness) == (0, 0)


async def test_nothing_younger_than_the_grace_period_is_swept(backend: Backend) -> None:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, publish=False, charge=False))
    await harness.setup_bus.client().send(
        PlaceOrder(order_id="o", amount=1), to=names.orders, idempotency_key="k"
    )
    await harness.run_until_quiet()

    assert await sweep_counted(harness, grace=600) == Swept(0, 0, 0)
    # O(orders), and its incoming token, claimed by it, which the sweep deletes with it.
    assert await residue(harness) == (1, 1)
    if backend.clock is not None:
        backend.clock.advance(601)
        assert await sweep_counted(harness, grace=600) == Swept(1, 0, 1)
        assert await residue(harness) == (0, 0)
