"""Concurrent requests with a bound on how many are in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


async def each(
    limit: asyncio.Semaphore, items: Iterable[T], work: Callable[[T], Awaitable[R]]
) -> list[R]:
    """``work`` on every item, at most ``limit`` at once, results in order. The first failure
    cancels the rest and is raised as itself (not as an exception group), so callers handle
    a storage error here as they would one from a single call. ``work`` must not call
    ``each`` with the same limit: holding it while waiting for it could deadlock.

    The semaphore wakes its waiters in the order they came, and the tasks start in the
    items' order: with a limit of one, the requests run one after the other in that order."""

    async def one(item: T) -> R:
        async with limit:
            return await work(item)

    listed = list(items)
    if len(listed) == 1:
        # Most rounds send one message: no task, no group (the simulator runs millions).
        return [await one(listed[0])]
    try:
        async with asyncio.TaskGroup() as group:
            running = [group.create_task(one(item)) for item in listed]
    except BaseExceptionGroup as e:
        raise e.exceptions[0] from None
    return [task.result() for task in running]
