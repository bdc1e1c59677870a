"""The in-memory provider's idempotency semantics, and how answers are classified."""

from __future__ import annotations

import pytest

from shared.effects.memory import InMemoryProvider
from shared.effects.provider import ProviderAnswer, outcome_of
from shared.errors import EffectKeyConflict, ProviderUnavailable


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
    assert refused.status == 409
    assert provider.applied("k1") == 1
    with pytest.raises(EffectKeyConflict):
        outcome_of(refused)


async def test_a_lost_answer_was_applied_and_its_retry_gets_the_first_answer() -> None:
    provider = InMemoryProvider(lost_answers=1)
    with pytest.raises(ProviderUnavailable):
        await provider.call("charge", {"amount": 10}, "k1")
    answer = await provider.call("charge", {"amount": 10}, "k1")
    assert outcome_of(answer) == "succeeded"
    assert provider.applied("k1") == 1


async def test_an_unavailable_provider_applies_nothing() -> None:
    provider = InMemoryProvider(unavailable=1)
    answer = await provider.call("charge", {"amount": 10}, "k1")
    assert provider.ledger == []
    with pytest.raises(ProviderUnavailable):
        outcome_of(answer)


async def test_a_decline_is_a_permanent_answer_remembered_under_its_key() -> None:
    provider = InMemoryProvider()
    declined = await provider.call("charge", {"amount": 10, "decline": True}, "k1")
    assert outcome_of(declined) == "failed"
    assert await provider.call("charge", {"amount": 10, "decline": True}, "k1") == declined
    assert provider.ledger == []


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(200, "succeeded"), (201, "succeeded"), (400, "failed"), (402, "failed")],
)
def test_final_statuses(status: int, outcome: str) -> None:
    assert outcome_of(ProviderAnswer(status, {})) == outcome


@pytest.mark.parametrize("status", [429, 500, 503, 302, 100])
def test_statuses_that_leave_the_outcome_open_are_retried(status: int) -> None:
    with pytest.raises(ProviderUnavailable):
        outcome_of(ProviderAnswer(status, {}))


async def test_a_provider_that_honours_no_key_applies_every_call() -> None:
    provider = InMemoryProvider(honours_keys=False)
    await provider.call("charge", {"amount": 5}, "k1")
    await provider.call("charge", {"amount": 5}, "k1")
    assert provider.applied("k1") == 2


async def test_declines_refuse_the_next_new_keys_and_a_repeat_gets_its_first_answer() -> None:
    provider = InMemoryProvider(declines=1)
    declined = await provider.call("charge", {"amount": 10}, "k1")
    assert outcome_of(declined) == "failed"
    assert await provider.call("charge", {"amount": 10}, "k1") == declined  # no new decline
    assert outcome_of(await provider.call("charge", {"amount": 10}, "k2")) == "succeeded"
    assert [entry.key for entry in provider.ledger] == ["k2"]
