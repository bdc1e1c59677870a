"""A crash at every storage step of one message, before and after it: the message recovers
and its effects are applied once, whichever step the crash hit."""

from __future__ import annotations

import pytest

from shared.testing import BusKit, When
from tests.testing import bakery
from tests.testing.bakery import Order, Oven, PlaceOrder, Round


async def placed(kit: BusKit) -> None:
    await kit.send(PlaceOrder(order="o1", cakes=2), to="orders")


async def steps_of_placing_an_order() -> int:
    kit = BusKit(bakery.app)
    await placed(kit)
    return len(await kit.deliver("orders"))


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_crash_at_any_step_of_a_message_still_applies_it_once(when: When) -> None:
    steps = await steps_of_placing_an_order()
    assert steps >= 6  # read, claim, commit, tokens, signals, delete, acknowledge at least
    for step in range(steps):
        kit = BusKit(bakery.app)
        await placed(kit)
        crashed = await kit.crash("orders", at=step, when=when)
        await kit.run_until_quiet()
        where = f"crash {when} step {step} ({crashed.kind} {crashed.target})"
        assert kit.crashes == 1, where
        assert await kit.state("orders", "o1", Order) == Order(status="paid", cakes=2), where
        assert await kit.state("kitchen", "o1", Oven) == Oven(baked=2), where
        assert await kit.state("couriers", "o1", Round) == Round(delivered=["o1"]), where
        [charge] = await kit.effects()
        assert kit.provider("payments").applied(charge.key) == 1, where
