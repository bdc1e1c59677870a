"""Failures that no retry can mend park the message on its first try, with a reason that
names the limit, whatever the endpoint's retry policy (issue 35): a state grown past Table
Storage's 1 MiB entity by a 200 KB body kept three times, a message a handler sends over
the payload limit, a body that fails its model. Nothing of the message is committed; its
token stays for ``bus replay``. A transient error under the same policy is still retried."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pydantic import BaseModel

from shared.bus import BusApp, Command, HandlerContext, Outcome, RetryPolicy
from shared.bus.app import Mode
from shared.bus.poison import replay
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
    rows_store,
)
from tests.bus.test_retries import deliver_visible
from tests.conftest import Backend, unique_name

each_backend = pytest.mark.parametrize(
    "backend", backend_modes(azurite=["token", "processed_messages"]), indirect=True
)

NOTE = "n" * 200_000
"""A 200 KB body: well under the payload limit; kept three times in the state it is
1.2 MB in Table Storage's count (two bytes a character), past the 1 MiB of an entity."""
KEPT_COPIES = 3


class Keep(Command):
    partition_by = "key"
    key: str
    note: str


class Forward(Command):
    partition_by = "key"
    key: str
    note: str


class Wobbly(Command):
    partition_by = "key"
    key: str


class Labelled(Command):
    partition_by = "key"
    key: str
    label: str


class Notes(BaseModel):
    notes: list[str] = []


def notes_app(name: str, mode: Mode, runs: Counter[str]) -> BusApp:
    """``Keep`` keeps the note in the state; ``Forward`` sends it on, past a payload limit
    the test sets; ``Wobbly`` fails once, then succeeds. Every one under a policy that would
    try it three times at once and three times later."""
    app = BusApp()
    endpoint = app.endpoint(name, state=Notes, mode=mode, retry=RetryPolicy.exponential())

    @endpoint.handles(Keep)
    def keep(ctx: HandlerContext[Notes], cmd: Keep) -> None:
        runs["keep"] += 1
        ctx.state.notes += [cmd.note] * KEPT_COPIES

    @endpoint.handles(Forward)
    def forward(ctx: HandlerContext[Notes], cmd: Forward) -> None:
        runs["forward"] += 1
        ctx.send(Keep(key=cmd.key, note=cmd.note + cmd.note), to=name)

    @endpoint.handles(Wobbly)
    def wobbly(ctx: HandlerContext[Notes], cmd: Wobbly) -> None:
        runs["wobbly"] += 1
        if runs["wobbly"] == 1:
            raise RuntimeError("a passing outage")
        ctx.state.notes.append("steady")

    return app


async def started(
    backend: Backend, mode: Mode, **config: object
) -> tuple[Harness, str, Counter[str]]:
    runs: Counter[str] = Counter()
    name = f"notes{unique_name('')[:8]}"
    app = notes_app(name, mode, runs)
    harness = await Harness.create(backend, app, jitter=random.Random(7), **config)
    return harness, name, runs


def store_has_a_limit(backend: Backend, mode: Mode) -> bool:
    """Table Storage bounds an entity; a PostgreSQL row is unbounded, and a document holds
    the state whole (Cosmos DB's 2 MB item, a blob document as large as a payload:
    ``tests/bus/test_document_limits.py`` parks at theirs); but the entity-outbox mode
    keeps its own ``entity_max_bytes`` in every store."""
    return rows_store(backend, mode) == "table" or mode == "entity_outbox"


async def parked_reason(harness: Harness, name: str) -> dict[str, object]:
    [parked] = await harness.poison_messages(name)
    reason = parked["poison"]
    assert isinstance(reason, dict)
    return reason


@each_backend
async def test_a_state_over_the_property_limit_parks_on_the_first_try(
    backend: Backend, mode: Mode
) -> None:
    # Given a 200 KB note the handler keeps in its partition's state
    harness, name, runs = await started(backend, mode)
    await harness.setup_bus.client().send(Keep(key="k", note=NOTE), to=name, idempotency_key="k")

    # When it is delivered
    outcomes = await deliver_visible(harness, name)

    if not store_has_a_limit(backend, mode):  # PostgreSQL and a document keep it whole
        assert outcomes == Counter({Outcome.PROCESSED: 1})
        assert (await harness.applied_state(name, "k", Notes)).notes == [NOTE] * KEPT_COPIES
        return
    # Then it is parked at once: one run, not one per retry, with the limit named
    assert outcomes == Counter({Outcome.POISONED: 1})
    assert runs["keep"] == 1
    reason = await parked_reason(harness, name)
    assert reason["error_type"] == "LimitExceeded"
    text = str(reason["reason"])
    assert "1,200," in text  # the state's size in Table Storage's bytes
    assert (
        "Table Storage allows 1 MiB per entity" in text
        or "BusConfig.entity_max_bytes=983,040" in text
    )
    assert "(not retried)" in text
    # and nothing committed: no state, no audit row; the token waits for a replay
    assert (await harness.applied_state(name, "k", Notes)).notes == []
    assert await harness.audit_ids(name) == []
    assert len(await harness.tokens()) == 1
    assert await harness.queue_depths() == {name: 0, f"{name}-poison": 1}


@each_backend
async def test_a_parked_over_limit_message_replays_and_parks_again(
    backend: Backend, mode: Mode
) -> None:
    if not store_has_a_limit(backend, mode):
        pytest.skip("nothing parks: a PostgreSQL row or a document holds the state whole")
    harness, name, runs = await started(backend, mode)
    await harness.setup_bus.client().send(Keep(key="k", note=NOTE), to=name, idempotency_key="k")
    await deliver_visible(harness, name)

    assert await replay(harness.raw, name) == 1
    outcomes = await deliver_visible(harness, name)

    assert outcomes == Counter({Outcome.POISONED: 1})
    assert runs["keep"] == 2
    assert await harness.audit_ids(name) == []


@each_backend
async def test_a_handler_sending_over_the_payload_limit_parks_on_the_first_try(
    backend: Backend, mode: Mode
) -> None:
    harness, name, runs = await started(backend, mode, max_payload_bytes=30_000)
    note = "f" * 20_000  # under the limit; the Keep it forwards holds it twice
    await harness.setup_bus.client().send(Forward(key="k", note=note), to=name, idempotency_key="f")

    assert await deliver_visible(harness, name) == Counter({Outcome.POISONED: 1})

    assert runs["forward"] == 1
    reason = await parked_reason(harness, name)
    assert reason["error_type"] == "MessageTooLarge"
    assert "the limit is 30,000 bytes (BUS_MAX_PAYLOAD_BYTES)" in str(reason["reason"])
    assert await harness.audit_ids(name) == []


@each_backend
async def test_a_transient_failure_under_the_same_policy_is_still_retried(
    backend: Backend, mode: Mode
) -> None:
    harness, name, runs = await started(backend, mode)
    await harness.setup_bus.client().send(Wobbly(key="k"), to=name, idempotency_key="w")

    assert await deliver_visible(harness, name) == Counter({Outcome.PROCESSED: 1})

    assert runs["wobbly"] == 2  # once failed, once retried at once
    assert (await harness.applied_state(name, "k", Notes)).notes == ["steady"]
    assert await harness.poison_messages(name) == []


@each_backend
async def test_a_body_that_fails_its_model_parks_on_the_first_try(
    backend: Backend, mode: Mode
) -> None:
    # Given a Keep sent as the sender's version has it, and a receiver whose Keep model
    # requires a field the sender's lacks (same type name; a field it does not know would
    # only be dropped)
    harness, name, runs = await started(backend, mode)
    await harness.setup_bus.client().send(Keep(key="k", note="n"), to=name, idempotency_key="s")
    _, handler = harness.app.get(name).handlers["Keep"]
    harness.app.get(name).handlers["Keep"] = (Labelled, handler)

    assert await deliver_visible(harness, name) == Counter({Outcome.POISONED: 1})

    assert runs["keep"] == 0
    reason = await parked_reason(harness, name)
    assert reason["error_type"] == "MessageSchemaError"
    assert "does not match its schema" in str(reason["reason"])
    assert len(await harness.tokens()) == 1
