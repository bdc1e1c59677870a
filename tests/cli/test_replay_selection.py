"""Replay's selection and dry run (``shared.bus.poison.replay``), on both backends: a pass
takes only what it selects, however many batches it reads, and leaves the rest visible."""

from __future__ import annotations

from shared.bus.poison import replay, replay_report
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


async def test_a_selection_skips_and_reports_only_the_damaged_messages_it_selects(
    backend: Backend,
) -> None:
    endpoint = await parked(backend, 2)
    poison = backend.account.queue(poison_queue(endpoint))
    damaged = ['{"poison": 5, "signal": "a"}', '{"poison": 6, "signal": "b"}']
    for content in damaged:
        await poison.send(content)
    wanted = {"m-1", damaged[0]}

    report = await replay_report(backend.account, endpoint, select=wanted.__contains__)

    assert report.replayed == 1
    [line] = report.skipped
    assert "cannot unwrap it" in line
    assert await visible(backend, endpoint) == {"m-1"}
    assert await visible(backend, poison_queue(endpoint)) == {"m-0", *damaged}  # released
