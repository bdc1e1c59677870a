"""The worker-wide body budget (issue 42, finding 4): many large bodies at once never hold
more than ``BUS_BODY_BUDGET_BYTES`` (counted by the budget's own accounting, not a clock),
what finds no room is postponed or answered 503 with ``Retry-After``, and nothing is lost,
parked or processed twice. In memory with a per-request latency (so that invocations
really overlap) and on Azurite."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from pydantic import BaseModel

from shared import http_ingress
from shared.bus import BusApp, Command, Event, HandlerContext, Outcome
from shared.config import build_config
from shared.errors import ConfigurationError
from shared.stores.latency import LatencyAccount
from tests.bus.harness import Harness
from tests.conftest import Backend, sample_settings, unique_name

LARGEST = 50_000
"""BUS_MAX_PAYLOAD_BYTES of these tests: a token may be this and its envelope's fields."""
TEXT = "x" * 40_000
"""A body too long to ride in a signal: every receiver reads its token or payload."""
MESSAGES = 16


class Store(Command):
    partition_by = "doc"
    doc: str
    text: str


class Stored(Event):
    partition_by = "doc"
    doc: str
    text: str


class Seen(BaseModel):
    ids: list[str] = []


@pytest.fixture
async def overlapping(backend: Backend) -> AsyncIterator[Backend]:
    """The suite's backend; in memory, with 1 ms per request, so that invocations started
    together overlap as they do on a real service."""
    if backend.clock is None:
        yield backend
        return
    yield Backend(backend.name, LatencyAccount(backend.account, 0.001), backend.clock)


def docs_app(suffix: str) -> BusApp:
    """``docs{suffix}`` keeps each Store and publishes it as Stored to ``copy0``/``copy1``:
    their tokens share the body as one payload."""
    app = BusApp()
    docs = app.endpoint(f"docs{suffix}", state=Seen)

    @docs.handles(Store)
    def store(ctx: HandlerContext[Seen], command: Store) -> None:
        ctx.state.ids.append(ctx.message_id)
        ctx.publish(Stored(doc=command.doc, text=command.text))

    for n in range(2):
        copy = app.endpoint(f"copy{n}{suffix}", state=Seen)

        @copy.handles(Stored)
        def stored(ctx: HandlerContext[Seen], event: Stored) -> None:
            ctx.state.ids.append(ctx.message_id)

    return app


async def seen(harness: Harness, endpoint: str) -> list[str]:
    ids: list[str] = []
    async for row in harness.rows(endpoint).states():
        ids += Seen.model_validate_json(row.data).ids
    return ids


async def at_once(harness: Harness, endpoint: str) -> Counter[Outcome]:
    """Every message waiting at ``endpoint``, all received at once."""
    messages = await harness.raw.queue(endpoint).receive(32, visibility_timeout=60)
    outcomes = await asyncio.gather(
        *(harness.bus.receive(endpoint, m.content, m.dequeue_count) for m in messages)
    )
    for message in messages:
        await harness.raw.queue(endpoint).delete(message.id, message.pop_receipt)
    return Counter(outcomes)


async def drain(harness: Harness, backend: Backend) -> None:
    """Deliver everything, postponed messages included once their delay has passed."""
    for _ in range(10):
        await backend.elapse(1.5)
        await harness.run_until_quiet()
        counts = [await harness.raw.queue(e).approximate_count() for e in harness.app.endpoints]
        if not any(counts):
            return
    raise AssertionError("postponed messages were never processed")


async def test_many_large_bodies_at_once_never_hold_more_than_the_budget(
    overlapping: Backend,
) -> None:
    """16 tokens of 40 KB (read with room for the largest token first), then 32 reads of
    the shared payloads their outputs make: at most the budget is ever held; what found no
    room (no wait here) was postponed, not failed, and is processed later, once."""
    suffix = unique_name("")[:6]
    harness = await Harness.create(
        overlapping,
        docs_app(suffix),
        max_payload_bytes=LARGEST,
        body_budget_bytes=2 * LARGEST + 40_000,
        body_budget_wait_seconds=0.0,
    )
    docs, copies = f"docs{suffix}", [f"copy0{suffix}", f"copy1{suffix}"]
    for n in range(MESSAGES):
        await harness.setup_bus.client().send(
            Store(doc=f"d{n}", text=TEXT), to=docs, idempotency_key=f"k{n}"
        )
    budget = harness.bus.budget

    first = await at_once(harness, docs)
    await drain(harness, overlapping)
    stored = [await seen(harness, copy) for copy in copies]

    assert first[Outcome.POSTPONED] > 0
    assert first[Outcome.PROCESSED] + first[Outcome.POSTPONED] == MESSAGES
    assert len(set(await seen(harness, docs))) == len(await seen(harness, docs)) == MESSAGES
    assert [len(set(ids)) for ids in stored] == [len(ids) for ids in stored] == [MESSAGES] * 2
    assert len(TEXT) < budget.peak <= budget.capacity
    assert budget.held == 0
    assert Outcome.POISONED not in harness.outcomes


async def test_shared_payloads_read_at_once_never_hold_more_than_the_budget(
    overlapping: Backend,
) -> None:
    """The subscribers' copies carry their envelopes in their signals: only the payloads
    are read, each counted by the size its reference names before it is downloaded."""
    suffix = unique_name("")[:6]
    harness = await Harness.create(
        overlapping,
        docs_app(suffix),
        max_payload_bytes=LARGEST,
        body_budget_bytes=LARGEST + 40_000,
        body_budget_wait_seconds=0.0,
    )
    docs, copy = f"docs{suffix}", f"copy0{suffix}"
    for n in range(MESSAGES):
        await harness.setup_bus.client().send(
            Store(doc=f"d{n}", text=TEXT), to=docs, idempotency_key=f"k{n}"
        )
    for message in await harness.raw.queue(docs).receive(32):  # one at a time: room for each
        await harness.deliver(docs, message)
    budget = harness.bus.budget
    budget.peak = 0

    outcomes = await at_once(harness, copy)
    await drain(harness, overlapping)

    assert outcomes[Outcome.POSTPONED] > 0
    assert outcomes[Outcome.PROCESSED] + outcomes[Outcome.POSTPONED] == MESSAGES
    assert len(TEXT) < budget.peak <= budget.capacity
    assert len(set(await seen(harness, copy))) == len(await seen(harness, copy)) == MESSAGES
    assert budget.held == 0


async def test_the_ingress_answers_503_with_retry_after_when_full_and_recovers(
    overlapping: Backend,
) -> None:
    """Six clients post 40 KB at once to an instance with room for two such bodies: four
    are answered 503 with Retry-After before their bodies are parsed, and nothing of theirs
    is sent; their retries with the same keys are accepted, and each key's message is sent
    once."""
    suffix = unique_name("")[:6]
    harness = await Harness.create(
        overlapping, docs_app(suffix), max_payload_bytes=LARGEST, body_budget_bytes=LARGEST + 40_000
    )
    docs = f"docs{suffix}"

    async def post(n: int) -> http_ingress.Answer:
        raw = json.dumps({"type": "Store", "to": docs, "body": {"doc": f"d{n}", "text": TEXT}})
        return await http_ingress.handle(harness.bus, {"Idempotency-Key": f"k{n}"}, raw.encode())

    answers = await asyncio.gather(*(post(n) for n in range(6)))
    refused = [n for n, a in enumerate(answers) if a.status == 503]
    sent = await harness.raw.queue(docs).approximate_count()
    retried = [await post(n) for n in refused]
    await drain(harness, overlapping)

    assert sorted(a.status for a in answers) == [202, 202, 503, 503, 503, 503]
    assert all("BUS_BODY_BUDGET_BYTES" in answers[n].body["error"] for n in refused)
    assert all("Retry-After" in http_ingress.response_headers(answers[n].status) for n in refused)
    assert sent == 2
    assert [a.status for a in retried] == [202] * 4
    assert len(set(await seen(harness, docs))) == len(await seen(harness, docs)) == 6
    assert harness.bus.budget.held == 0


async def test_the_ingress_refuses_requests_beyond_its_concurrency(overlapping: Backend) -> None:
    suffix = unique_name("")[:6]
    harness = await Harness.create(overlapping, docs_app(suffix), http_concurrency=2)
    docs = f"docs{suffix}"

    async def post(n: int) -> http_ingress.Answer:
        raw = json.dumps({"type": "Store", "to": docs, "body": {"doc": f"d{n}", "text": "t"}})
        return await http_ingress.handle(harness.bus, {"Idempotency-Key": f"k{n}"}, raw.encode())

    answers = await asyncio.gather(*(post(n) for n in range(5)))
    again = await post(4)

    assert sorted(a.status for a in answers) == [202, 202, 503, 503, 503]
    assert all("BUS_HTTP_CONCURRENCY" in a.body["error"] for a in answers if a.status == 503)
    assert harness.bus.ingress_requests.peak == 2
    assert harness.bus.ingress_requests.active == 0
    assert again.status in (200, 202)


def test_a_budget_below_one_largest_body_stops_start_up() -> None:
    with pytest.raises(ConfigurationError, match="BUS_BODY_BUDGET_BYTES"):
        build_config(sample_settings(BUS_MAX_PAYLOAD_BYTES="1000", BUS_BODY_BUDGET_BYTES="999"))

    config = build_config(sample_settings(BUS_MAX_PAYLOAD_BYTES="1000"))

    assert config.bus.body_budget == 4000
