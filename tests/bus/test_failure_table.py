"""Every row of the failure table (``shared.bus.failures.RULES``) does what it says.

For each row, a real message meets the row's condition in a real in-memory pipeline, in every
mode, and ends with the row's outcome and nothing else: a signal sent again hidden (give back,
defer, postpone, retry later), one entry in the poison queue (park), the handler run again
within the delivery (retry now), the error raised to the host, or nothing (a duplicate). The
conditions of the message itself come about as they do in production where that is quick to
arrange (a newer format, a type this instance lacks, a signal that disagrees with its token, a
full body budget, a due time beyond the queue's longest delay); a missing payload is raised
by the handler as the payload read would, the token deleted under it or not. The modules'
own tests (test_give_back, test_schedule, test_body_budget, test_retries, test_shared_payloads,
test_permanent_failures) go further into each outcome.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from shared.bus import Bus, BusApp, Command, HandlerContext, Outcome, RetryPolicy
from shared.bus.app import Mode
from shared.bus.budget import Holding
from shared.bus.failures import RULES, Action, Rule
from shared.clock import to_datetime
from shared.errors import DoNotRetry, PayloadMissing
from shared.stores.instrumented import Fault, Operation
from shared.stores.queue import MAX_VISIBILITY_TIMEOUT
from tests.bus.flow import Ledger
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.conftest import Backend, unique_name

in_memory = pytest.mark.parametrize("backend", backend_modes(azurite=[], sql=False), indirect=True)

LAST_TRY = 5


class Order(Command):
    partition_by = "key"
    key: str


class Later(Command):
    """A type only a newer version of the app handles."""

    partition_by = "key"
    key: str


@dataclass
class Case:
    """One message's way through the pipeline, and what the handler does each time it runs."""

    harness: Harness
    name: str
    raising: list[Exception] = field(default_factory=list)
    runs: int = 0
    on_run: Callable[[], Awaitable[None]] | None = None

    @classmethod
    async def create(
        cls, backend: Backend, mode: Mode, retry: RetryPolicy | None = None, **config: object
    ) -> Case:
        name = f"ft{unique_name('')[:8]}"
        app = BusApp()
        endpoint = app.endpoint(name, state=Ledger, mode=mode, retry=retry)
        harness = await Harness.create(backend, app, max_dequeue_count=LAST_TRY, **config)
        case = cls(harness, name)

        @endpoint.handles(Order)
        async def handle(ctx: HandlerContext[Ledger], order: Order) -> None:
            case.runs += 1
            if case.on_run is not None:
                await case.on_run()
            if case.raising:
                raise case.raising.pop(0)

        return case

    async def signal(self, command: Command | None = None) -> str:
        """The text of the signal a send of ``command`` queues (taken off the queue)."""
        client = self.harness.setup_bus.client()
        await client.send(command or Order(key="k"), to=self.name, idempotency_key="k1")
        return await self.take()

    async def take(self) -> str:
        queue = self.harness.raw.queue(self.name)
        [message] = await queue.receive(1, visibility_timeout=30)
        await queue.delete(message.id, message.pop_receipt)
        return message.content

    async def receive(self, raw: str, dequeue_count: int = 1) -> Outcome | Exception:
        try:
            return await self.harness.bus.receive(self.name, raw, dequeue_count)
        except Exception as error:
            return error


def unhinted(raw: str, **changes: object) -> str:
    """The signal without its token hints (read from the token), with ``changes``."""
    data = json.loads(raw)
    data.pop("etag", None)
    data.pop("envelope", None)
    return json.dumps({**data, **changes})


Scenario = Callable[[Backend, Mode], Awaitable[tuple[Case, Outcome | Exception]]]


async def newer_signal(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode)
    raw = json.dumps({"v": 9, "message_id": "m", "anything": {"new": 1}})
    return case, await case.receive(raw)


async def not_a_signal(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode)
    return case, await case.receive("not json")


async def budget_full(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode, body_budget_wait_seconds=0.0)
    raw = unhinted(await case.signal())  # read from its token, within the budget
    budget = case.harness.bus.budget
    holding = Holding(budget)
    assert await holding.take("elsewhere", budget.capacity, 0.0)
    try:
        return case, await case.receive(raw)
    finally:
        await holding.release_all()


async def newer_type(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode)
    newer = BusApp()
    newer.endpoint(case.name, state=Ledger, mode=mode).handles(Later)(lambda ctx, m: None)
    harness = case.harness
    client = Bus(newer, harness.raw, harness.config).client()
    await client.send(Later(key="k"), to=case.name, idempotency_key="k1")
    return case, await case.receive(await case.take())


async def disagreeing_token(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode)
    raw = unhinted(await case.signal(), partition_key="another")
    return case, await case.receive(raw)


async def not_due(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode)
    assert backend.clock is not None
    due = to_datetime(backend.clock()) + timedelta(days=8)  # beyond the queue's longest hiding
    client = case.harness.setup_bus.client()
    await client.send(Order(key="k"), to=case.name, idempotency_key="k1", deliver_at=due)
    backend.clock.advance(MAX_VISIBILITY_TIMEOUT)
    return case, await case.receive(await case.take())


async def payload_gone_with_token(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode)
    raw = await case.signal()
    token = json.loads(raw)["token"]
    tokens = case.harness.raw.blob_container(case.harness.config.tokens_container)

    async def token_goes() -> None:  # an earlier copy finished, and the cleanup took both
        await tokens.delete(token)

    case.on_run = token_goes
    case.raising = [PayloadMissing(f"payload of {token} is gone")]
    return case, await case.receive(raw)


async def refused(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode, retry=RetryPolicy(immediate=2, delays=(10.0,)))
    case.raising = [DoNotRetry("order refused")]
    return case, await case.receive(await case.signal())


async def state_store_down(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    # Under a retry policy and on the host's last try: the rows below would retry or park it.
    case = await Case.create(backend, mode, retry=RetryPolicy(immediate=2, delays=(10.0,)))
    raw = await case.signal()
    endpoint_table = case.name

    def state_times_out(operation: Operation) -> Fault | None:
        table = operation.kind.startswith("table.")
        ours = operation.target.split("/")[0] == endpoint_table
        return Fault.ERROR_BEFORE if table and ours else None

    case.harness.instrumentation.plan = state_times_out
    return case, await case.receive(raw, dequeue_count=LAST_TRY)


async def fails_once_retried_now(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode, retry=RetryPolicy(immediate=1))
    case.raising = [RuntimeError("provider unavailable")]
    return case, await case.receive(await case.signal())


async def fails_retried_later(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode, retry=RetryPolicy(immediate=0, delays=(10.0,)))
    case.raising = [RuntimeError("provider unavailable")]
    return case, await case.receive(await case.signal())


async def fails_first_try(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode)
    case.raising = [RuntimeError("provider unavailable")]
    return case, await case.receive(await case.signal())


async def fails_last_try(backend: Backend, mode: Mode) -> tuple[Case, Outcome | Exception]:
    case = await Case.create(backend, mode)
    case.raising = [RuntimeError("provider unavailable")]
    return case, await case.receive(await case.signal(), dequeue_count=LAST_TRY)


SCENARIOS: dict[str, Scenario] = {
    "a signal in a format newer than this instance reads": newer_signal,
    "a signal that is not one (bad JSON or schema, nested too deeply, a bad partition key)": (
        not_a_signal
    ),
    "no room in the worker's body budget within its wait": budget_full,
    "a token or message written by a newer version": newer_type,
    "a token or body that breaks its format or its message's schema": disagreeing_token,
    "a delayed message before its due time": not_due,
    "a shared payload missing": payload_gone_with_token,
    "a failure retrying cannot help (DoNotRetry, a limit)": refused,
    "the app's state store not answering (a timeout, a lost connection, a 5xx)": (state_store_down),
    "a failure with an immediate retry left": fails_once_retried_now,
    "a failure under a retry policy": fails_retried_later,
    "a failure before the host's last try": fails_first_try,
    "a failure on the host's last try": fails_last_try,
}

SENT_AGAIN: dict[Action, Outcome] = {
    Action.GIVE_BACK: Outcome.GIVEN_BACK,
    Action.DEFER: Outcome.DEFERRED,
    Action.POSTPONE: Outcome.POSTPONED,
    Action.RETRY_LATER: Outcome.RETRYING,
    Action.WAIT: Outcome.POSTPONED,
}
"""The actions that send the signal again, hidden, and let this copy go."""


def test_every_row_has_its_scenario() -> None:
    assert sorted(SCENARIOS) == sorted(rule.condition for rule in RULES)


def test_the_docs_list_the_rows_in_their_order() -> None:
    text = (Path(__file__).parents[2] / "docs" / "retries.md").read_text(encoding="utf-8")
    listed = [line.split(" | ")[0].removeprefix("| ") for line in text.splitlines()]
    assert [c for c in listed if c in SCENARIOS] == [rule.condition for rule in RULES]


@in_memory
@pytest.mark.parametrize("rule", RULES, ids=[rule.action.value for rule in RULES])
async def test_each_row_ends_as_it_says(backend: Backend, mode: Mode, rule: Rule) -> None:
    case, outcome = await SCENARIOS[rule.condition](backend, mode)
    queue = case.harness.raw.queue(case.name)
    queued, visible = await queue.approximate_count(), await queue.peek(32)
    parked = await case.harness.poison_messages(case.name)

    if rule.action in SENT_AGAIN:
        assert outcome is SENT_AGAIN[rule.action]
        assert (queued, visible, parked) == (1, [], [])
    elif rule.action is Action.PARK:
        assert outcome is Outcome.POISONED
        assert (queued, len(parked)) == (0, 1)
        if rule.note:
            assert f"({rule.note})" in str(parked[0]["poison"])
    elif rule.action is Action.RETRY_NOW:
        assert (outcome, case.runs) == (Outcome.PROCESSED, 2)
        assert (queued, parked) == (0, [])
    elif rule.action is Action.RAISE_TO_HOST:
        assert isinstance(outcome, RuntimeError)
        assert f"at endpoint {case.name}, try 1" in "".join(outcome.__notes__)
        assert (queued, parked) == (0, [])
    else:
        assert rule.action is Action.DUPLICATE_IF_GONE
        assert (outcome, queued, parked) == (Outcome.DUPLICATE, 0, [])


@in_memory
async def test_a_missing_payload_whose_token_is_still_there_is_a_failure(
    backend: Backend, mode: Mode
) -> None:
    # The other side of "duplicate if its token is gone": the rows below decide it.
    case = await Case.create(backend, mode)
    case.raising = [PayloadMissing("payload gone, token still there")]
    outcome = await case.receive(await case.signal())
    assert isinstance(outcome, PayloadMissing)
    assert await case.harness.poison_messages(case.name) == []
