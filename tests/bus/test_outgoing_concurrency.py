"""Token creates and signal sends run concurrently, at most BUS_SEND_CONCURRENCY at once, and
keep the protocol's rules: an attempt id whose create had an unknown outcome is abandoned
and replaced, the results are in the deliveries' order whatever order the creates finished
in, and a failed round discards every token it created.

The stores answer after a real delay (``shared.stores.latency``), so requests are in flight
together; faults come from the fault injector (``shared.stores.instrumented``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

import pytest

from shared.bus.config import BusConfig
from shared.bus.envelope import Envelope, Signal
from shared.bus.ids import derived_id, fresh_id
from shared.bus.outgoing import create_tokens, send_signals
from shared.errors import OutcomeUnknown
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.delegating import DelegatingAccount, DelegatingBlobContainer, DelegatingQueue
from shared.stores.instrumented import Fault, FaultPlan, InstrumentedAccount, Operation
from shared.stores.latency import LatencyAccount
from shared.stores.memory import MemoryStorageAccount
from shared.stores.queue import MessageQueue

T = TypeVar("T")
DESTINATIONS = [f"sub{n:02d}" for n in range(40)]
LATENCY = 0.005


class InFlight(DelegatingAccount):
    """Counts the blob and queue requests in flight at once, the most of them seen."""

    def __init__(self, inner: StorageAccount) -> None:
        super().__init__(inner)
        self.now = self.most = 0

    def blob_container(self, name: str) -> BlobContainer:
        return _CountedBlobs(self.inner.blob_container(name), self)

    def queue(self, name: str) -> MessageQueue:
        return _CountedQueue(self.inner.queue(name), self)

    async def counted(self, call: Callable[[], Awaitable[T]]) -> T:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            return await call()
        finally:
            self.now -= 1


class _CountedBlobs(DelegatingBlobContainer):
    def __init__(self, inner: BlobContainer, counter: InFlight) -> None:
        super().__init__(inner)
        self._counter = counter

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await self._counter.counted(call)


class _CountedQueue(DelegatingQueue):
    def __init__(self, inner: MessageQueue, counter: InFlight) -> None:
        super().__init__(inner)
        self._counter = counter

    async def _call(self, kind: str, target: str, call: Callable[[], Awaitable[T]]) -> T:
        return await self._counter.counted(call)


def deliveries(incoming: str) -> list[Envelope]:
    return [
        Envelope(
            id=derived_id(incoming, "out", 0, destination),
            type="Announced",
            kind="event",
            source="hub",
            destination=destination,
            partition_key="p",
            correlation_id=incoming,
            causation_id=incoming,
            created_at=datetime.now(UTC),
            body={"n": n},
        )
        for n, destination in enumerate(DESTINATIONS)
    ]


def unknown_outcome_for(message_ids: dict[str, int], fault: Fault) -> FaultPlan:
    """A plan: the first ``times`` creates of each named message's token get ``fault``."""
    left = dict(message_ids)

    def plan(operation: Operation) -> Fault | None:
        if operation.kind != "blob.create":
            return None
        for message_id, times in left.items():
            if message_id in operation.target and times:
                left[message_id] = times - 1
                return fault
        return None

    return plan


async def stores() -> tuple[InFlight, InstrumentedAccount, BlobContainer]:
    memory = MemoryStorageAccount()
    tokens = memory.blob_container("tokens")
    await tokens.create_if_missing()
    for destination in DESTINATIONS:
        await memory.queue(destination).create_if_missing()
    counted = InFlight(LatencyAccount(memory, LATENCY))
    return counted, InstrumentedAccount(counted), tokens


@pytest.mark.parametrize("limit", [1, 4, 16])
async def test_creates_and_sends_run_at_most_the_limit_at_once(limit: int) -> None:
    counted, account, _ = await stores()
    config = BusConfig(send_concurrency=limit)
    incoming = fresh_id()
    planned = deliveries(incoming)

    created = await create_tokens(
        account.blob_container("tokens"),
        planned,
        payloads=account.blob_container("payloads"),
        sender="hub",
        incoming_id=incoming,
        config=config,
    )
    creates = counted.most
    counted.most = 0
    await send_signals(account, tuple(created.committed_candidates), created.hints, config=config)

    assert creates == limit
    assert counted.most == limit


async def test_unknown_outcomes_are_abandoned_and_everything_is_listed_in_delivery_order() -> None:
    """Deliveries 3 and 7 meet a create whose outcome is unknown (applied, response lost),
    delivery 7 twice: their attempts are abandoned and new ones created, and the signals,
    hints and abandoned names come back in the deliveries' order."""
    _, account, tokens = await stores()
    incoming = fresh_id()
    planned = deliveries(incoming)
    account.instrumentation.plan = unknown_outcome_for(
        {planned[7].id: 2, planned[3].id: 1}, Fault.ERROR_AFTER
    )

    created = await create_tokens(
        account.blob_container("tokens"),
        planned,
        payloads=account.blob_container("payloads"),
        sender="hub",
        incoming_id=incoming,
        config=BusConfig(send_concurrency=16),
    )

    signals = created.committed_candidates
    assert [s.message_id for s in signals] == [e.id for e in planned]
    assert [s.destination for s in signals] == DESTINATIONS
    assert len({s.attempt_id for s in signals}) == len(planned)
    assert [name.split("/")[3] for name in created.abandoned] == [
        planned[3].id,
        planned[7].id,
        planned[7].id,
    ]
    assert not {s.token for s in signals} & set(created.abandoned)
    assert set(created.hints) == {s.token for s in signals}
    for s in signals:  # each hint is the token as created: its ETag and its envelope
        token = await tokens.read(s.token)
        assert (created.hints[s.token].etag, created.hints[s.token].envelope) == (
            token.etag,
            token.data.decode(),
        )
    stored = {p.name async for p in tokens.list()}
    assert stored == {s.token for s in signals} | set(created.abandoned)


async def test_a_failed_round_discards_every_token_it_created() -> None:
    """Delivery 20's creates all time out before they are applied: the round fails, and the
    tokens its other creates made (concurrently, before and after) are deleted."""
    _, account, tokens = await stores()
    incoming = fresh_id()
    planned = deliveries(incoming)
    config = BusConfig(send_concurrency=8)
    account.instrumentation.plan = unknown_outcome_for(
        {planned[20].id: config.max_create_attempts}, Fault.ERROR_BEFORE
    )

    with pytest.raises(OutcomeUnknown, match="could not create a token"):
        await create_tokens(
            account.blob_container("tokens"),
            planned,
            payloads=account.blob_container("payloads"),
            sender="hub",
            incoming_id=incoming,
            config=config,
        )

    assert [p.name async for p in tokens.list()] == []


async def test_signals_go_out_in_the_deliveries_order_at_a_limit_of_one() -> None:
    _, account, _ = await stores()
    incoming = fresh_id()
    planned = deliveries(incoming)
    config = BusConfig(send_concurrency=1)
    created = await create_tokens(
        account.blob_container("tokens"),
        planned,
        payloads=account.blob_container("payloads"),
        sender="hub",
        incoming_id=incoming,
        config=config,
    )
    mark = account.instrumentation.count

    await send_signals(account, tuple(created.committed_candidates), created.hints, config=config)

    sent = [op.target for op in account.instrumentation.operations[mark:]]
    assert sent == DESTINATIONS
    for destination, signal in zip(DESTINATIONS, created.committed_candidates, strict=True):
        [message] = await account.queue(destination).peek()
        assert Signal.parse(message.content).token == signal.token
