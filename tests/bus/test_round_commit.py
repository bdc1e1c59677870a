"""The one rule for a round whose commit does not succeed (``shared.bus.round_commit``), which
token mode and the window modes both follow: each row of its table held to what it states,
on real tokens in the in-memory blob store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from shared.bus.outgoing import CreatedTokens
from shared.bus.records import OutgoingSignal
from shared.bus.round_commit import commit_round
from shared.bus.rounds import Conflict
from shared.errors import (
    AlreadyExists,
    LimitExceeded,
    OutcomeUnknown,
    PermanentFailure,
    StorageError,
    TransactionFailed,
)
from shared.stores.blob import BlobContainer
from shared.stores.memory import MemoryStorageAccount

NAMES = ("orders/m1/a1/0", "orders/m1/a1/1")


async def round_tokens() -> tuple[BlobContainer, CreatedTokens]:
    tokens = MemoryStorageAccount().blob_container("tokens")
    await tokens.create_if_missing()
    for name in NAMES:
        await tokens.create(name, b"{}")
    created = CreatedTokens(
        committed_candidates=[
            OutgoingSignal(
                destination="payments",
                message_id=f"m{n}",
                attempt_id="a1",
                token=name,
                partition_key="p",
                type="Charge",
            )
            for n, name in enumerate(NAMES)
        ],
        abandoned=[],
    )
    return tokens, created


async def left(tokens: BlobContainer) -> list[str]:
    return sorted([blob.name async for blob in tokens.list("")])


def failing(error: Exception) -> Callable[[], Awaitable[str]]:
    async def commit() -> str:
        raise error

    return commit


async def test_a_commit_that_succeeds_keeps_its_tokens_and_returns_its_result() -> None:
    tokens, created = await round_tokens()
    abandoned: list[str] = []

    async def commit() -> str:
        return "etag-1"

    assert await commit_round(tokens, created, abandoned, commit) == "etag-1"
    assert await left(tokens) == list(NAMES)
    assert abandoned == []


@pytest.mark.parametrize(
    "refusal", [PermanentFailure("refused"), LimitExceeded("the state is over 1 MiB")]
)
async def test_a_refused_commit_deletes_its_tokens_and_the_refusal_goes_on(
    refusal: PermanentFailure,
) -> None:
    tokens, created = await round_tokens()
    abandoned: list[str] = []

    with pytest.raises(type(refusal)):
        await commit_round(tokens, created, abandoned, failing(refusal))

    assert await left(tokens) == []
    assert abandoned == []


async def test_a_commit_lost_to_another_writer_deletes_its_tokens_and_starts_again() -> None:
    tokens, created = await round_tokens()
    abandoned: list[str] = []
    lost = TransactionFailed(0, AlreadyExists("O(m) is there"))

    with pytest.raises(Conflict):
        await commit_round(tokens, created, abandoned, failing(lost))

    assert await left(tokens) == []
    assert abandoned == []


async def test_a_commit_of_unknown_outcome_keeps_its_tokens_as_abandoned_and_starts_again() -> None:
    tokens, created = await round_tokens()
    abandoned: list[str] = []

    with pytest.raises(Conflict):
        await commit_round(tokens, created, abandoned, failing(OutcomeUnknown("timed out")))

    assert await left(tokens) == list(NAMES)
    assert abandoned == list(NAMES)


async def test_any_other_error_leaves_the_tokens_to_the_cleanup_and_goes_on() -> None:
    tokens, created = await round_tokens()
    abandoned: list[str] = []

    with pytest.raises(StorageError):
        await commit_round(tokens, created, abandoned, failing(StorageError("down")))

    assert await left(tokens) == list(NAMES)
    assert abandoned == []
