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


async def test_a_missing_queue_is_not_found(backend: Backend) -> None:
    with pytest.raises(NotFound):
        await backend.account.queue(unique_name("missing")).send("x")


@pytest.mark.parametrize("name", ["ab", "Upper", "a--b", "a_b", "poison-"])
def test_invalid_queue_names_are_refused(backend: Backend, name: str) -> None:
    with pytest.raises(InvalidName):
        backend.account.queue(name)
