"""Cosmos DB's answers as the project's errors: the adapter edge of ``shared.stores.cosmos``.

A write that got no definite answer (a timeout, a lost connection, a 5xx, 408) may have landed,
so it ends as ``OutcomeUnknown``; the same on a read changed nothing and ends as a
``StorageError``. Answers that say the request was not carried out (429 once the SDK's own
waits for throttling are spent, a request that never left: ``ServiceRequestError``) are
definite whatever the operation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from azure.core.exceptions import AzureError, ServiceRequestError
from azure.cosmos.exceptions import CosmosHttpResponseError

from shared.errors import (
    AlreadyExists,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
    TooLarge,
)

THROTTLED = 429


def translate(error: AzureError, what: str, *, write: bool) -> Exception:
    """The project's error for one SDK error of the request ``what`` (a read or a write)."""
    if isinstance(error, CosmosHttpResponseError):
        return from_status(int(error.status_code or 0), what, write=write)
    if isinstance(error, ServiceRequestError):
        # As the storage adapters say it: no answer, so the state store counts as down
        # (``StateUnreachable``), whether or not the request left.
        return OutcomeUnknown(f"{what}: Cosmos DB could not be reached ({error})")
    return unanswered(f"{what}: no answer from Cosmos DB ({type(error).__name__})")


def from_status(status: int, what: str, *, write: bool) -> Exception:
    """The project's error for a status Cosmos DB answered. A 404 of a conditional write
    means the item is gone, which is its condition failing."""
    if status == 409:
        return AlreadyExists(f"{what}: already exists")
    if status == 412 or (status == 404 and write):
        return PreconditionFailed(f"{what}: changed or gone (ETag condition)")
    if status == 404:
        return NotFound(f"{what}: not found (is the container provisioned? `bus provision`)")
    if status == 413:
        return TooLarge(f"{what}: refused by Cosmos DB as too large (413)")
    if status == THROTTLED:
        return StorageError(f"{what}: throttled by Cosmos DB (429): request units spent")
    if status == 408 or status >= 500:
        return unanswered(f"{what}: Cosmos DB answered {status}")
    return StorageError(f"{what}: Cosmos DB refused the request ({status})")


def unanswered(text: str) -> Exception:
    """A request without a definite answer: a write may still land, a read changed nothing;
    both say the store did not answer (``OutcomeUnknown``, as the storage adapters' no-answer),
    so that the bus waits for its state store rather than spending a message's tries."""
    return OutcomeUnknown(text)


@asynccontextmanager
async def translated(what: str, seconds: float, *, write: bool) -> AsyncIterator[None]:
    """Run one SDK call with a deadline (the SDK's own waits included), its errors made the
    project's; a call still unanswered at the deadline is unanswered like a lost response."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except AzureError as e:
        raise translate(e, what, write=write) from e
    except TimeoutError as e:
        raise unanswered(f"{what}: no answer from Cosmos DB within {seconds:g} s") from e
