"""Replaying and discarding parked messages go through a queue anyone with queue send can
fill: each pass hands every message to the action once, ends when the queue is exhausted (not
on a batch it has seen before), is capped, and says when the cap stopped it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.bus.discard import Discard, DiscardPlaces, discard_parked
from shared.bus.parked_pass import LOOK_SECONDS, PEEK_LIMIT
from shared.bus.poison import read_poison, replay_report
from shared.clock import ManualClock
from shared.stores.account import StorageAccount
from shared.stores.instrumented import Instrumentation, InstrumentedAccount, Operation
from shared.stores.memory import MemoryStorageAccount
from shared.stores.queue import MessageQueue, QueueMessage
from tests.bus.test_parked_listing_bounds import filled
from tests.conftest import Backend

ENTRIES = 3 * PEEK_LIMIT
"""Three batches deep: the pass receives the first batch, then the next ones."""
HOLD_RUNS_OUT = 2 * LOOK_SECONDS + 1
"""Longer than a pass hides a message for (replay used to hide them for a minute)."""


def beyond_first_batch(content: str) -> bool:
    """Every message but those of the first batch a pass receives (``m-0`` to ``m-31``):
    the first batch is left where it is, held, and shows again while the pass goes on."""
    message_id = read_poison(content).message_id or ""
    return int(message_id.removeprefix("m-")) >= PEEK_LIMIT


def whose_hold_runs_out_mid_pass() -> tuple[StorageAccount, ManualClock]:
    """A memory account where the first batch's hold runs out just before the pass asks for
    its second: the queue hands that batch out again first, the rest waiting behind it."""
    clock = ManualClock()
    receives = 0

    async def hold_runs_out(operation: Operation) -> None:
        nonlocal receives
        if operation.kind == "queue.receive":
            receives += 1
            if receives == 2:
                clock.advance(HOLD_RUNS_OUT)

    memory = MemoryStorageAccount(clock=clock)
    return InstrumentedAccount(memory, Instrumentation(on_operation=hold_runs_out)), clock


async def places_in(account: StorageAccount) -> DiscardPlaces:
    places = DiscardPlaces(
        archive=account.blob_container("discarded"),
        tokens=account.blob_container("tokens"),
        parked=account.blob_container("parked"),
    )
    for container in (places.archive, places.tokens, places.parked):
        await container.create_if_missing()
    return places


def discard_by_ops() -> Discard:
    return Discard("flooded", "ops", datetime.now(UTC), timedelta(days=30))


async def ids_left(queue: MessageQueue) -> list[str]:
    left: list[QueueMessage] = []
    while batch := await queue.receive(PEEK_LIMIT, visibility_timeout=LOOK_SECONDS):
        left += batch
    return sorted(read_poison(m.content).message_id or "" for m in left)


async def test_a_discard_whose_first_batch_shows_again_goes_on_to_the_end_of_the_queue() -> None:
    account, clock = whose_hold_runs_out_mid_pass()
    queue, endpoint = await filled(account, ENTRIES)
    places = await places_in(account)

    report = await discard_parked(
        queue, endpoint, lambda m: beyond_first_batch(m.content), places, discard_by_ops()
    )

    assert report.complete
    discarded = sorted(d.message_id or "" for d in report.discarded)
    assert discarded == sorted(f"m-{i}" for i in range(PEEK_LIMIT, ENTRIES))  # each once
    assert len([b async for b in places.archive.list()]) == ENTRIES - PEEK_LIMIT
    clock.advance(LOOK_SECONDS + 1)
    assert await ids_left(queue) == sorted(f"m-{i}" for i in range(PEEK_LIMIT))


async def test_a_replay_whose_first_batch_shows_again_goes_on_to_the_end_of_the_queue() -> None:
    account, clock = whose_hold_runs_out_mid_pass()
    queue, endpoint = await filled(account, ENTRIES)
    await account.queue(endpoint).create_if_missing()

    report = await replay_report(account, endpoint, select=beyond_first_batch)

    assert report.complete
    assert report.replayed == ENTRIES - PEEK_LIMIT
    assert await account.queue(endpoint).approximate_count() == ENTRIES - PEEK_LIMIT  # each once
    clock.advance(LOOK_SECONDS + 1)
    assert await ids_left(queue) == sorted(f"m-{i}" for i in range(PEEK_LIMIT))


async def test_a_discard_stops_at_its_look_limit_and_says_so(backend: Backend) -> None:
    queue, endpoint = await filled(backend.account, 100)
    places = await places_in(backend.account)

    capped = await discard_parked(
        queue, endpoint, lambda m: True, places, discard_by_ops(), look_limit=40
    )

    assert not capped.complete
    assert len(capped.discarded) == 40
    rest = await discard_parked(
        queue, endpoint, lambda m: True, places, discard_by_ops(), look_limit=100
    )
    assert rest.complete
    assert len(rest.discarded) == 60
    assert await queue.approximate_count() == 0


async def test_a_replay_stops_at_its_look_limit_and_says_so(backend: Backend) -> None:
    queue, endpoint = await filled(backend.account, 100)
    await backend.account.queue(endpoint).create_if_missing()

    capped = await replay_report(backend.account, endpoint, look_limit=40, dry_run=True)

    assert not capped.complete
    assert capped.replayed == 40
    # No wait for the holds to run out: the dry run made the 40 it hid visible again as it
    # ended, so the next pass replays all of them at once.
    whole = await replay_report(backend.account, endpoint, look_limit=100)
    assert whole.complete
    assert whole.replayed == 100
    assert await queue.approximate_count() == 0


async def test_a_replay_that_moved_its_limit_says_whether_any_are_left(backend: Backend) -> None:
    _, endpoint = await filled(backend.account, 40)
    await backend.account.queue(endpoint).create_if_missing()

    first = await replay_report(backend.account, endpoint, limit=40)

    assert first.replayed == 40
    assert first.complete  # nothing was left parked
