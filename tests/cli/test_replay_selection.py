"""Replay's selection and dry run (``shared.bus.poison.replay``), on both backends: a pass
takes only what it selects, however many batches it reads, and leaves the rest visible."""

from __future__ import annotations

from shared.bus.poison import replay
from shared.resources import poison_queue
from tests.conftest import Backend, unique_name


async def parked(backend: Backend, count: int) -> str:
    """An endpoint whose poison queue holds ``count`` messages: m-0, m-1, ..."""
    endpoint = unique_name("replay")[:40]
    for name in (endpoint, poison_queue(endpoint)):
        await backend.account.queue(name).create_if_missing()
    poison = backend.account.queue(poison_queue(endpoint))
    for i in range(count):
        await poison.send(f"m-{i}")
    return endpoint


async def visible(backend: Backend, queue: str) -> set[str]:
    return {m.content for m in await backend.account.queue(queue).peek(32)}


async def test_a_selective_pass_reads_past_many_batches_and_leaves_the_rest_visible(
    backend: Backend,
) -> None:
    endpoint = await parked(backend, 40)
    wanted = {"m-3", "m-20", "m-39"}

    moved = await replay(backend.account, endpoint, select=wanted.__contains__)

    assert moved == 3
    assert await visible(backend, endpoint) == wanted
    assert await backend.account.queue(poison_queue(endpoint)).approximate_count() == 37
    assert len(await visible(backend, poison_queue(endpoint))) == 32  # released, not hidden


async def test_a_dry_run_counts_within_the_limit_and_moves_nothing(backend: Backend) -> None:
    endpoint = await parked(backend, 5)
    even = {"m-0", "m-2", "m-4"}

    assert await replay(backend.account, endpoint, select=even.__contains__, dry_run=True) == 3
    assert await replay(backend.account, endpoint, limit=2, dry_run=True) == 2
    assert await visible(backend, endpoint) == set()
    assert len(await visible(backend, poison_queue(endpoint))) == 5

    assert await replay(backend.account, endpoint, limit=2, select=even.__contains__) == 2
    assert len(await visible(backend, endpoint)) == 2
    assert len(await visible(backend, poison_queue(endpoint))) == 3
