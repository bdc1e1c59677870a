"""A shared payload is read only when the handler is about to run (issue 42, finding 3).

Anyone with peek and send on a queue can copy a signal as often as they like. Each copy of
a message already processed must cost its receiver no more than its dedup check: not a byte
of the shared payload. Counted through the store (``CountingBytes`` wraps the account the
bus uses), in every endpoint mode, on the in-memory stores and on Azurite."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from lab.bench.payload_shared import CountingBytes, Counts
from shared.bus import Bus, BusApp, Event, HandlerContext, Outcome
from shared.bus.app import Mode
from shared.stores.instrumented import Fault, SimulatedCrash, fault_at_first, no_faults
from tests.bus.harness import (
    MODES,
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.bus.test_shared_payloads import TEXT, Shout
from tests.conftest import Backend, unique_name

pytestmark = pytest.mark.parametrize(
    "backend", backend_modes(azurite=MODES, sql=False), indirect=True
)

COPIES = 3


class Shouted(Event):
    partition_by = "key"
    key: str
    text: str


class Heard(BaseModel):
    texts: int = 0


def shouting_app(suffix: str, mode: Mode) -> BusApp:
    """``hub{suffix}`` publishes Shouted (its text ``TEXT``: shared, as two subscribers in
    ``mode`` receive it)."""
    app = BusApp()
    hub = app.endpoint(f"hub{suffix}", state=Heard)

    @hub.handles(Shout)
    def shout(ctx: HandlerContext[Heard], command: Shout) -> None:
        ctx.publish(Shouted(key=command.key, text=TEXT))

    for n in range(2):
        ear = app.endpoint(f"ear{n}{suffix}", state=Heard, mode=mode)

        @ear.handles(Shouted)
        def heard(ctx: HandlerContext[Heard], event: Shouted) -> None:
            ctx.state.texts += 1

    return app


async def shouted(backend: Backend, mode: Mode) -> tuple[Harness, str]:
    """A harness whose hub has published: the first subscriber's signal waits."""
    suffix = unique_name("")[:6]
    harness = await Harness.create(backend, shouting_app(suffix, mode))
    hub, ear = f"hub{suffix}", f"ear0{suffix}"
    await harness.setup_bus.client().send(Shout(key="k"), to=hub, idempotency_key="s")
    for message in await harness.raw.queue(hub).receive(32):
        await harness.deliver(hub, message)
    return harness, ear


async def texts_heard(harness: Harness, ear: str) -> int:
    heard = Heard()
    async for row in harness.rows(ear).states():
        heard = Heard.model_validate_json(row.data)
    return heard.texts


async def test_copies_of_a_processed_signal_read_nothing_of_its_payload(
    backend: Backend, mode: Mode
) -> None:
    """The attacker's copies come after the message was processed and before its incoming
    token is deleted (token mode keeps it claimed until the cleanup's R7; a window mode's
    receiver crashed just before deleting it, so its dedup record is committed): each is
    a duplicate by its dedup record alone."""
    harness, ear = await shouted(backend, mode)
    [signal] = await harness.raw.queue(ear).peek()
    counts = Counts()
    counting = Bus(harness.app, CountingBytes(harness.account, counts), harness.config)
    payloads = harness.config.payloads_container
    if mode == "token":
        assert await counting.receive(ear, signal.content) is Outcome.PROCESSED
    else:
        harness.instrumentation.plan = fault_at_first("blob.delete", Fault.CRASH_BEFORE)
        with pytest.raises(SimulatedCrash):
            await counting.receive(ear, signal.content)
        harness.instrumentation.plan = no_faults
    read_to_process = counts.read_from[payloads]

    outcomes = [await counting.receive(ear, signal.content) for _ in range(COPIES)]

    assert read_to_process > len(TEXT)  # the one run of the handler read the body, once
    assert counts.read_from[payloads] == read_to_process  # the copies: not a byte
    assert outcomes[0] is Outcome.RESUMED
    assert set(outcomes) <= {Outcome.RESUMED, Outcome.DUPLICATE}
    assert await texts_heard(harness, ear) == 1


async def test_a_copy_of_a_signal_not_yet_processed_is_processed_once(
    backend: Backend, mode: Mode
) -> None:
    """A copy that comes first runs the handler, and reads the payload to do so; the
    genuine signal after it is the duplicate and reads nothing."""
    harness, ear = await shouted(backend, mode)
    [signal] = await harness.raw.queue(ear).peek()
    counts = Counts()
    counting = Bus(harness.app, CountingBytes(harness.account, counts), harness.config)
    payloads = harness.config.payloads_container

    first = await counting.receive(ear, signal.content)
    read_by_first = counts.read_from[payloads]
    [genuine] = await harness.raw.queue(ear).receive(1)
    again = await counting.receive(ear, genuine.content, genuine.dequeue_count)

    assert first is Outcome.PROCESSED
    assert again in {Outcome.RESUMED, Outcome.DUPLICATE}
    assert read_by_first > len(TEXT)
    assert counts.read_from[payloads] == read_by_first
    assert await texts_heard(harness, ear) == 1
