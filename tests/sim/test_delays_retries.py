"""Delayed messages and retry policies in the simulator: the real pipeline, explored with
every interleaving of one deviation and every single fault at every operation (a crash
between a delayed send and R7 among them). Every run keeps every invariant, NoEarlyDelivery
included."""

from __future__ import annotations

from lab.sim.explore import CONFIGS, exhaustive
from lab.sim.invariants import NO_EARLY_DELIVERY, Observation, check
from lab.sim.model import Applied
from lab.sim.variants import Variant
from shared.stores.account import StorageAccount
from shared.stores.delegating import DelegatingAccount, DelegatingQueue
from shared.stores.queue import MessageQueue


async def test_a_delayed_message_under_every_interleaving_of_one_deviation() -> None:
    summary = await exhaustive(CONFIGS["small-delay"], max_deviations=1, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 25


async def test_a_delayed_message_under_every_single_fault_at_every_operation() -> None:
    summary = await exhaustive(CONFIGS["small-delay"], max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 80
    assert summary.faults == summary.schedules - 1


class _FirstSendAtOnce(DelegatingQueue):
    """Shows a signal at once the first time it is sent, whatever its delay: the receiver
    gets every delayed message early once, as a replayed or forged signal would arrive.
    Sent again (a receiver hiding it until its time), it keeps its delay."""

    def __init__(self, inner: MessageQueue, seen: set[str]) -> None:
        super().__init__(inner)
        self.seen = seen

    async def send(
        self, content: str, *, visibility_delay: float = 0.0, time_to_live: float | None = None
    ) -> str:
        if content not in self.seen:
            self.seen.add(content)
            visibility_delay = 0.0
        return await self.inner.send(
            content, visibility_delay=visibility_delay, time_to_live=time_to_live
        )


class _EarlySignals(DelegatingAccount):
    def __init__(self, inner: StorageAccount) -> None:
        super().__init__(inner)
        self.seen: set[str] = set()

    def queue(self, name: str) -> MessageQueue:
        return _FirstSendAtOnce(self.inner.queue(name), self.seen)


async def test_signals_that_arrive_early_are_held_back_by_the_receiver() -> None:
    # Only the receiver's own check of the token's due time holds the message back here
    early = Variant(
        "early-signals",
        "a delayed message is not processed before its due time",
        wrap=_EarlySignals,
    )
    summary = await exhaustive(
        CONFIGS["small-delay"], max_deviations=0, max_faults=1, variant=early
    )

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 80


def test_an_entry_processed_before_its_due_time_is_a_violation() -> None:
    entry = Applied(id="i", name="m0", source="client", causation=None, digest="d")
    reference = Observation(applied={"second": [entry]})
    on_time = Observation(applied={"second": [entry]})
    early = Observation(applied={"second": [entry.model_copy(update={"early": True})]})

    assert check(on_time, reference, client="client", residue=False) == []
    [violation] = check(early, reference, client="client", residue=False)
    assert violation.invariant == NO_EARLY_DELIVERY


async def test_a_retried_handler_under_every_interleaving_of_one_deviation() -> None:
    summary = await exhaustive(CONFIGS["small-retry"], max_deviations=1, max_faults=0)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 30


async def test_a_retried_handler_under_every_single_fault_at_every_operation() -> None:
    summary = await exhaustive(CONFIGS["small-retry"], max_deviations=0, max_faults=1)

    assert summary.violations == 0, summary.failures[:1]
    assert summary.schedules > 120
