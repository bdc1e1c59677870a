"""The queue contract, run against every backend.

Timing tests wait just over the minimum one-second visibility timeout; on the in-memory backend
the wait moves a manual clock instead of sleeping.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shared.errors import InvalidName, InvalidValue, NotFound, TooLarge
from shared.stores.queue import MessageQueue
from tests.conftest import Backend, unique_name


@pytest.fixture
async def queue(backend: Backend) -> AsyncIterator[MessageQueue]:
    queue = backend.account.queue(unique_name("q"))
    await queue.create_if_missing()
    yield queue
    await queue.delete_queue()


async def test_a_sent_message_is_received_once_until_its_visibility_timeout(
    queue: MessageQueue,
) -> None:
    sent_id = await queue.send('{"m": "héllo ☃"}')

    [message] = await queue.receive(visibility_timeout=30)
    again = await queue.receive(visibility_timeout=30)

    assert message.id == sent_id
    assert message.content == '{"m": "héllo ☃"}'
    assert message.dequeue_count == 1
    assert message.pop_receipt
    assert again == []


async def test_an_unacknowledged_message_comes_back_with_a_higher_dequeue_count(
    backend: Backend, queue: MessageQueue
) -> None:
    await queue.send("work")
    [first] = await queue.receive(visibility_timeout=1)

    await backend.elapse(1.5)
    [second] = await queue.receive(visibility_timeout=30)

    assert second.id == first.id
    assert second.dequeue_count == 2
    assert second.pop_receipt != first.pop_receipt
    with pytest.raises(NotFound):
        await queue.delete(first.id, first.pop_receipt)
    await queue.delete(second.id, second.pop_receipt)
    assert await queue.approximate_count() == 0


async def test_delete_needs_the_current_pop_receipt(queue: MessageQueue) -> None:
    await queue.send("a")
    [message] = await queue.receive()

    await queue.delete(message.id, message.pop_receipt)

    with pytest.raises(NotFound):
        await queue.delete(message.id, message.pop_receipt)
    assert await queue.receive() == []


async def test_update_can_release_a_message_at_once_and_renews_the_receipt(
    queue: MessageQueue,
) -> None:
    await queue.send("a")
    [message] = await queue.receive(visibility_timeout=60)

    receipt = await queue.update(message.id, message.pop_receipt, visibility_timeout=0, content="b")

    assert receipt != message.pop_receipt
    with pytest.raises(NotFound):
        await queue.update(message.id, message.pop_receipt, visibility_timeout=0)
    [back] = await queue.receive()
    assert (back.id, back.content, back.dequeue_count) == (message.id, "b", 2)


async def test_a_delayed_message_stays_hidden_until_its_delay_passes(
    backend: Backend, queue: MessageQueue
) -> None:
    await queue.send("later", visibility_delay=1)
    assert await queue.receive() == []
    assert await queue.peek() == []
    assert await queue.approximate_count() == 1

    await backend.elapse(1.5)

    [message] = await queue.receive()
    assert message.content == "later"


async def test_a_batch_receive_takes_up_to_the_requested_count(queue: MessageQueue) -> None:
    for i in range(5):
        await queue.send(str(i))

    batch = await queue.receive(3)
    rest = await queue.receive(32)

    assert len(batch) == 3
    assert sorted(m.content for m in batch + rest) == ["0", "1", "2", "3", "4"]
    assert len({m.id for m in batch + rest}) == 5


async def test_peek_does_not_receive(queue: MessageQueue) -> None:
    await queue.send("p")
    [peeked] = await queue.peek()
    [received] = await queue.receive()
    assert peeked.content == received.content == "p"
    assert peeked.dequeue_count == 0
    assert received.dequeue_count == 1


async def test_clear_and_count(queue: MessageQueue) -> None:
    for i in range(3):
        await queue.send(str(i))
    assert await queue.approximate_count() == 3
    await queue.clear()
    assert await queue.approximate_count() == 0


async def test_messages_are_limited_to_64_kib_encoded(queue: MessageQueue) -> None:
    largest = "x" * (48 * 1024)
    await queue.send(largest)
    with pytest.raises(TooLarge):
        await queue.send(largest + "y")
    with pytest.raises(TooLarge):
        await queue.send("é" * (24 * 1024 + 1))

    [message] = await queue.receive()
    assert message.content == largest
    assert await queue.receive() == []


async def test_out_of_range_arguments_are_refused(queue: MessageQueue) -> None:
    with pytest.raises(InvalidValue):
        await queue.receive(33)
    with pytest.raises(InvalidValue):
        await queue.receive(visibility_timeout=0)
    with pytest.raises(InvalidValue):
        await queue.send("x", visibility_delay=8 * 24 * 3600)


async def test_every_message_says_when_it_expires_and_one_sent_without_expiry_never_does(
    backend: Backend, queue: MessageQueue
) -> None:
    """The poison queues keep what an operator must still replay: ``time_to_live=-1`` is
    kept for good, and a peek tells the cleanup which entries will expire (the default is
    seven days, as the Functions host's own moves get)."""
    kept = await queue.send("kept", time_to_live=-1)
    default = await queue.send("default")
    await queue.send("short", time_to_live=2)

    peeked = {m.id: m for m in await queue.peek()}
    [received] = [m for m in await queue.receive(32, visibility_timeout=1) if m.id == default]

    assert peeked[kept].expires_on is None
    week = peeked[default].expires_on - peeked[default].inserted_on  # type: ignore[operator]
    assert abs(week.total_seconds() - 7 * 24 * 3600) <= 1
    assert received.expires_on == peeked[default].expires_on  # a receive does not change it
    await backend.elapse(2.5)
    assert sorted(m.content for m in await queue.peek()) == ["default", "kept"]
    with pytest.raises(InvalidValue):
        await queue.send("x", time_to_live=0)
    with pytest.raises(InvalidValue):
        await queue.send("x", time_to_live=5, visibility_delay=5)


async def test_the_memory_queue_drops_a_message_at_its_expiry_on_its_clock(
    backend: Backend, queue: MessageQueue
) -> None:
    """Eight days on the manual clock: what the service does to a week-long message, and
    not to one sent with no expiry (Azurite cannot be made to wait that long)."""
    if backend.clock is None:
        pytest.skip("needs a manual clock")
    await queue.send("kept", time_to_live=-1)
    await queue.send("default")
    backend.clock.advance(7 * 24 * 3600 - 1)
    assert await queue.approximate_count() == 2

    backend.clock.advance(1)

    assert [m.content for m in await queue.peek()] == ["kept"]
    backend.clock.advance(365 * 24 * 3600)
    [message] = await queue.receive()
    assert (message.content, message.expires_on) == ("kept", None)


async def test_a_missing_queue_is_not_found(backend: Backend) -> None:
    with pytest.raises(NotFound):
        await backend.account.queue(unique_name("missing")).send("x")


@pytest.mark.parametrize("name", ["ab", "Upper", "a--b", "a_b", "poison-"])
def test_invalid_queue_names_are_refused(backend: Backend, name: str) -> None:
    with pytest.raises(InvalidName):
        backend.account.queue(name)
