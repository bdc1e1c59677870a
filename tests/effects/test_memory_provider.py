"""The in-memory provider's idempotency semantics, and how answers are classified."""

from __future__ import annotations

import asyncio

import pytest

from shared.bus.effects import ServiceDeclaration
from shared.effects.memory import InMemoryProvider
from shared.effects.provider import ProviderAnswer, outcome_of
from shared.errors import EffectInProgress, EffectKeyConflict, ProviderUnavailable

SERVICE = ServiceDeclaration("payments", {"charge": "/v1/charges"})
"""Declared with the default statuses: 409 in progress, 422 key reused."""


async def test_the_same_key_and_body_return_the_first_answer_and_apply_once() -> None:
    provider = InMemoryProvider()
    first = await provider.call("charge", {"amount": 10}, "k1")
    again = await provider.call("charge", {"amount": 10}, "k1")
    assert again == first
    assert provider.applied("k1") == 1
    await provider.call("charge", {"amount": 10}, "k2")
    assert [entry.key for entry in provider.ledger] == ["k1", "k2"]


async def test_the_same_key_with_another_body_is_refused() -> None:
    provider = InMemoryProvider()
    await provider.call("charge", {"amount": 10}, "k1")
    refused = await provider.call("charge", {"amount": 11}, "k1")
    assert refused.status == 422
    assert provider.applied("k1") == 1
    with pytest.raises(EffectKeyConflict):
        outcome_of(refused, SERVICE)


async def test_a_call_while_the_first_of_its_key_runs_is_in_progress_applying_nothing() -> None:
    provider = InMemoryProvider(busy_until_refused=1)
    first = asyncio.create_task(provider.call("charge", {"amount": 10}, "k1"))
    await asyncio.sleep(0)  # the first call runs: applied, still running
    assert provider.applied("k1") == 1
    second = await provider.call("charge", {"amount": 10}, "k1")
    assert second.status == 409
    with pytest.raises(EffectInProgress):
        outcome_of(second, SERVICE)
    answer = await first
    assert outcome_of(answer, SERVICE) == "succeeded"
    assert await provider.call("charge", {"amount": 10}, "k1") == answer
    assert (provider.applied("k1"), provider.in_progress_answered) == (1, 1)


async def test_a_call_its_caller_gave_up_on_keeps_its_key_in_progress() -> None:
    provider = InMemoryProvider(busy_until_refused=2)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await provider.call("charge", {"amount": 10}, "k1")
    statuses = [(await provider.call("charge", {"amount": 10}, "k1")).status for _ in range(3)]
    assert statuses == [409, 409, 200]
    assert provider.applied("k1") == 1


async def test_a_lost_answer_was_applied_and_its_retry_gets_the_first_answer() -> None:
    provider = InMemoryProvider(lost_answers=1)
    with pytest.raises(ProviderUnavailable):
        await provider.call("charge", {"amount": 10}, "k1")
    answer = await provider.call("charge", {"amount": 10}, "k1")
    assert outcome_of(answer, SERVICE) == "succeeded"
    assert provider.applied("k1") == 1


async def test_an_unavailable_provider_applies_nothing() -> None:
    provider = InMemoryProvider(unavailable=1)
    answer = await provider.call("charge", {"amount": 10}, "k1")
    assert provider.ledger == []
    with pytest.raises(ProviderUnavailable):
        outcome_of(answer, SERVICE)


async def test_a_decline_is_a_permanent_answer_remembered_under_its_key() -> None:
    provider = InMemoryProvider()
    declined = await provider.call("charge", {"amount": 10, "decline": True}, "k1")
    assert outcome_of(declined, SERVICE) == "failed"
    assert await provider.call("charge", {"amount": 10, "decline": True}, "k1") == declined
    assert provider.ledger == []


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(200, "succeeded"), (201, "succeeded"), (400, "failed"), (402, "failed")],
)
def test_final_statuses(status: int, outcome: str) -> None:
    assert outcome_of(ProviderAnswer(status, {}), SERVICE) == outcome


@pytest.mark.parametrize("status", [429, 500, 503, 302, 100, 409])
def test_statuses_that_leave_the_outcome_open_are_retried(status: int) -> None:
    with pytest.raises(ProviderUnavailable):
        outcome_of(ProviderAnswer(status, {}), SERVICE)


def test_a_service_declares_its_own_statuses_for_in_progress_and_key_reused() -> None:
    declared = ServiceDeclaration(
        "other",
        {"pay": "/pay"},
        in_progress_statuses={425},
        key_reused_statuses={409, 400},
    )
    with pytest.raises(EffectInProgress):
        outcome_of(ProviderAnswer(425, {}), declared)
    for status in (409, 400):
        with pytest.raises(EffectKeyConflict):
            outcome_of(ProviderAnswer(status, {}), declared)
    assert outcome_of(ProviderAnswer(422, {}), declared) == "failed"


async def test_a_provider_that_honours_no_key_applies_every_call() -> None:
    provider = InMemoryProvider(honours_keys=False)
    await provider.call("charge", {"amount": 5}, "k1")
    await provider.call("charge", {"amount": 5}, "k1")
    assert provider.applied("k1") == 2


async def test_declines_refuse_the_next_new_keys_and_a_repeat_gets_its_first_answer() -> None:
    provider = InMemoryProvider(declines=1)
    declined = await provider.call("charge", {"amount": 10}, "k1")
    assert outcome_of(declined, SERVICE) == "failed"
    assert await provider.call("charge", {"amount": 10}, "k1") == declined  # no new decline
    assert outcome_of(await provider.call("charge", {"amount": 10}, "k2"), SERVICE) == "succeeded"
    assert [entry.key for entry in provider.ledger] == ["k2"]
