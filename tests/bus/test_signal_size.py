"""A signal the bus sends is always one its receivers accept: an envelope copy short enough
to ride along may still take the signal past ``MAX_SIGNAL_CHARS`` once JSON escapes its
quotes, and then the signal goes without it (the receiver reads the token)."""

from __future__ import annotations

import json
from typing import Any

from shared.bus import BusApp, Command, HandlerContext
from shared.bus.envelope import MAX_INLINE_ENVELOPE_CHARS, MAX_SIGNAL_CHARS, SIGNAL_ROOM_CHARS
from shared.clock import ManualClock
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import Harness
from tests.conftest import Backend


class Pack(Command):
    partition_by = "parcel"
    parcel: str
    items: list[str]


async def _sent_and_processed(items: list[str]) -> dict[str, Any]:
    """The signal sending a Pack of ``items`` puts on the queue, once it is processed."""
    handled: list[int] = []
    app = BusApp()

    @app.endpoint("packing").handles(Pack)
    def pack(ctx: HandlerContext[Any], cmd: Pack) -> None:
        handled.append(len(cmd.items))

    clock = ManualClock()
    harness = await Harness.create(Backend("memory", MemoryStorageAccount(clock=clock), clock), app)
    await harness.setup_bus.client().send(
        Pack(parcel="p1", items=items), to="packing", idempotency_key="k"
    )
    [queued] = await harness.raw.queue("packing").peek()
    await harness.run_until_quiet()
    assert handled == [len(items)]
    signal: dict[str, Any] = json.loads(queued.content)
    signal["chars"] = len(queued.content)
    return signal


async def test_an_envelope_copy_whose_escapes_overflow_the_signal_is_left_out() -> None:
    # About 2,000 one-letter items: an envelope within the copy's limit, four quotes each
    items = ["x"] * ((MAX_INLINE_ENVELOPE_CHARS - 600) // 4)

    signal = await _sent_and_processed(items)

    assert "envelope" not in signal
    assert "etag" not in signal
    assert signal["chars"] <= MAX_SIGNAL_CHARS - SIGNAL_ROOM_CHARS


async def test_a_copy_that_fits_still_rides_along() -> None:
    signal = await _sent_and_processed(["x"] * 100)

    assert "envelope" in signal
    assert len(signal["envelope"]) < MAX_INLINE_ENVELOPE_CHARS
