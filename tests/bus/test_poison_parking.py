"""Parking with a reason, parking by reference, replaying every form, and the log line per
message: on the in-memory stores and on Azurite (token mode; the pipeline's entry is common
to the modes)."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from datetime import UTC, datetime

import pytest
from azure.storage.queue.aio import QueueClient

from lab.local.azurite import AzuriteEndpoints
from shared.bus import BusApp, Command, HandlerContext, Outcome
from shared.bus.poison import (
    EXCERPT_CHARS,
    MAX_REASON_CHARS,
    discard,
    park,
    poison_body,
    reference_body,
    replay_report,
    unwrap,
)
from shared.bus.poison import Reason as PoisonReason
from shared.clock import to_datetime
from shared.resources import poison_queue
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.bus.flow import Ledger
from tests.bus.harness import Harness
from tests.bus.test_failures import Flaky, flaky_app
from tests.bus.test_sweep import sweep_all
from tests.conftest import Backend, unique_name


async def harness_with(backend: Backend, failures: dict[str, int], **config: object) -> Harness:
    name = f"flaky{unique_name('')[:8]}"
    parked = unique_name("parked")
    harness = await Harness.create(
        backend, flaky_app(name, failures), parked_container=parked, **config
    )
    await harness.raw.blob_container(parked).create_if_missing()
    return harness


def only_endpoint(harness: Harness) -> str:
    [name] = harness.app.endpoints
    return name


async def test_the_last_try_parks_the_message_with_its_last_error(backend: Backend) -> None:
    failures = {"left": 1000}
    harness = await harness_with(backend, failures, max_dequeue_count=3)
    name = only_endpoint(harness)
    receipt = await harness.setup_bus.client().send(Flaky(key="k"), to=name, idempotency_key="k")

    before = to_datetime(harness.config.clock()).replace(microsecond=0)
    await harness.run_until_quiet()
    after = to_datetime(harness.config.clock())

    assert failures["left"] == 997  # three tries, then parked by the pipeline itself
    [parked] = await harness.raw.queue(poison_queue(name)).peek()
    poisoned = unwrap(parked.content, name)
    failed_at = poisoned.info.pop("failed_at")
    assert isinstance(failed_at, str)
    assert before <= datetime.fromisoformat(failed_at) <= after  # whole seconds, when it failed
    assert poisoned.info == {
        "endpoint": name,
        "reason": "RuntimeError: payment provider unavailable",
        "dequeue_count": 3,
        "error_type": "RuntimeError",
        "message_id": receipt.message_ids[0],
        "message_type": "Flaky",
    }  # this worker gives no insertion time: the reason says none
    failures["left"] = 0
    assert (
        await replay_report(harness.raw, name, container=harness.config.parked_container)
    ).replayed == 1
    await harness.run_until_quiet()
    assert len(await harness.applied(name)) == 1
    assert await harness.tokens_in_flight() == []


async def test_a_parked_message_says_when_it_was_enqueued_and_when_it_last_failed(
    backend: Backend,
) -> None:
    """The first try followed the queue message's insertion; the last failure is the one
    that parked it, on the bus's clock."""
    harness = await harness_with(backend, {"left": 1000}, max_dequeue_count=3)
    name = only_endpoint(harness)
    await harness.setup_bus.client().send(Flaky(key="k"), to=name, idempotency_key="k")
    [message] = await harness.raw.queue(name).receive()
    await backend.elapse(2)
    before = to_datetime(harness.config.clock()).replace(microsecond=0)

    assert (
        await harness.bus.receive(name, message.content, 3, enqueued_at=message.inserted_on)
        is Outcome.POISONED
    )
    assert (
        await harness.bus.receive(
            name, "not a signal", 1, enqueued_at=datetime(2026, 1, 2, 3, 4, 5)
        )
        is Outcome.POISONED
    )
    after = to_datetime(harness.config.clock())

    parked = [
        unwrap(m.content, name).info for m in await harness.raw.queue(poison_queue(name)).peek(2)
    ]
    failed = parked[0]
    assert failed["enqueued_at"] == message.inserted_on.astimezone(UTC).isoformat(
        timespec="seconds"
    )
    # On Azurite the clock is real time: the failures happened between before and after.
    failed_at = datetime.fromisoformat(failed["failed_at"])
    assert before <= failed_at <= after
    first, last = (datetime.fromisoformat(failed[k]) for k in ("enqueued_at", "failed_at"))
    assert (last - first).total_seconds() >= 1
    refused = parked[1]
    assert refused["error_type"] == "MalformedSignal"
    assert refused["enqueued_at"] == "2026-01-02T03:04:05+00:00"  # no zone given: UTC
    assert failed_at <= datetime.fromisoformat(refused["failed_at"]) <= after


async def test_a_hostile_text_too_large_to_park_whole_is_parked_as_an_excerpt_and_no_blob(
    backend: Backend,
) -> None:
    harness = await harness_with(backend, {"left": 0})
    name = only_endpoint(harness)
    container = harness.raw.blob_container(harness.config.parked_container)
    original = '"' * 47_000  # fits a queue message; beside its reason in JSON it does not

    await harness.raw.queue(name).send(original)
    await harness.run_until_quiet()

    [parked] = await harness.raw.queue(poison_queue(name)).peek()
    poisoned = unwrap(parked.content, name)
    assert (poisoned.signal, poisoned.original, poisoned.excerpt_only) == (None, None, True)
    assert "signal is 47000 characters" in poisoned.reason
    assert poisoned.info["excerpt"] == '"' * EXCERPT_CHARS
    assert poisoned.info["sha256"] == hashlib.sha256(original.encode()).hexdigest()
    assert poisoned.info["chars"] == 47_000
    assert parked.expires_on is None
    assert [b.name async for b in container.list()] == []  # nothing kept in a blob
    assert await harness.raw.queue(name).approximate_count() == 0  # acknowledged, not retried

    report = await replay_report(harness.raw, name, container=harness.config.parked_container)
    assert report.replayed == 0
    [skipped] = report.skipped
    assert "only an excerpt of it was kept" in skipped
    assert await harness.raw.queue(poison_queue(name)).approximate_count() == 1  # left there


class Note(Command):
    partition_by = "key"
    key: str
    text: str = ""


async def note_harness(backend: Backend, failing: dict[str, bool] | None = None) -> Harness:
    """An endpoint taking notes whose text travels in the signal's envelope copy; its
    handler fails with a long error while ``failing["now"]``, and the first try is the last."""
    name = f"notes{unique_name('')[:8]}"
    app = BusApp()
    endpoint = app.endpoint(name, state=Ledger)

    @endpoint.handles(Note)
    def handle(ctx: HandlerContext[Ledger], note: Note) -> None:
        ctx.state.applied.append(ctx.message_id)
        if failing is not None and failing["now"]:
            raise RuntimeError("é" * MAX_REASON_CHARS)

    parked = unique_name("parked")
    harness = await Harness.create(backend, app, parked_container=parked, max_dequeue_count=1)
    await harness.raw.blob_container(parked).create_if_missing()
    return harness


LONG_NOTE = "é" * 7000
"""Escaped in JSON every "é" takes six characters: beside a long reason it does not fit."""


async def test_a_signal_whose_token_exists_too_large_to_park_whole_is_kept_by_reference(
    backend: Backend,
) -> None:
    """Its token waits for it, so it must replay whole: the pipeline keeps it in a blob at
    most a signal long, which replay deletes once the poison message is gone."""
    failing = {"now": True}
    harness = await note_harness(backend, failing)
    name = only_endpoint(harness)
    container = harness.raw.blob_container(harness.config.parked_container)
    await harness.setup_bus.client().send(
        Note(key="k", text=LONG_NOTE), to=name, idempotency_key="k"
    )
    [signal] = await harness.raw.queue(name).peek()

    await harness.run_until_quiet()  # fails on its last try: parked

    [parked] = await harness.raw.queue(poison_queue(name)).peek()
    poisoned = unwrap(parked.content, name)
    assert poisoned.original is not None
    assert (await container.read(poisoned.original)).data.decode() == signal.content
    assert parked.expires_on is None
    failing["now"] = False
    report = await replay_report(harness.raw, name, container=harness.config.parked_container)
    assert (report.replayed, report.skipped) == (1, [])
    [replayed] = await harness.raw.queue(name).peek()
    assert replayed.content == signal.content
    assert [b.name async for b in container.list()] == []  # deleted once the entry was
    assert await harness.raw.queue(poison_queue(name)).approximate_count() == 0
    await harness.run_until_quiet()
    assert len(await harness.applied(name)) == 1


async def test_the_same_signal_naming_no_token_is_parked_as_an_excerpt(backend: Backend) -> None:
    harness = await note_harness(backend)
    name = only_endpoint(harness)
    await harness.setup_bus.client().send(
        Note(key="k", text=LONG_NOTE), to=name, idempotency_key="k"
    )
    [signal] = await harness.raw.queue(name).peek()
    await harness.run_until_quiet()  # processed; its token waits for the cleanup's R7
    await sweep_all(harness)
    assert await harness.tokens() == []  # now its token is gone
    reason = PoisonReason(name, "é" * MAX_REASON_CHARS, 1)

    form = await park(
        harness.raw,
        signal.content,
        reason,
        harness.config.parked_container,
        tokens=harness.raw.blob_container(harness.config.tokens_container),
    )

    assert form == "excerpt"
    container = harness.raw.blob_container(harness.config.parked_container)
    assert [b.name async for b in container.list()] == []


async def test_deeply_nested_json_is_parked_at_once(backend: Backend) -> None:
    harness = await harness_with(backend, {"left": 0})
    name = only_endpoint(harness)
    await harness.raw.queue(name).send("[" * 5000)

    await harness.run_until_quiet()

    [parked] = await harness.raw.queue(poison_queue(name)).peek()
    poisoned = unwrap(parked.content, name)
    assert poisoned.info["reason"] == "signal is nested too deeply"
    assert poisoned.info["dequeue_count"] == 1


async def test_replay_skips_and_reports_what_it_cannot_unwrap_and_replays_the_rest(
    backend: Backend,
) -> None:
    harness = await harness_with(backend, {"left": 0})
    name = only_endpoint(harness)
    other = f"other{unique_name('')[:8]}"
    poison = harness.raw.queue(poison_queue(name))
    replayable = [
        "raw signal moved by the host",
        "ünïcödé ☃ {",
        '{"poison": {"reason": "old"}, "signal": "old-format signal"}',
        poison_body("new-format signal", PoisonReason(name, "why", 1)),
    ]
    damaged = [
        '{"poison": 5, "signal": "x"}',
        '{"poison": {}, "signal": 7}',
        '{"poison": {}, "extra": 1}',
        '{"poison": {}, "signal": "\\ud800"}',  # valid JSON, but no text can be sent
        json.dumps({"poison": {"original": f"{other}/{uuid.uuid4()}"}}),  # another queue's
        json.dumps({"poison": {"original": f"{name}/../tokens/x"}}),
        json.dumps({"poison": {"original": f"{name}/{uuid.uuid4()}"}}),  # blob missing
    ]
    for content in replayable + damaged:
        await poison.send(content)

    report = await replay_report(harness.raw, name, container=harness.config.parked_container)

    assert report.replayed == len(replayable)
    assert len(report.skipped) == len(damaged)
    assert all(line.startswith(f"{name}: skipped poison message ") for line in report.skipped)
    assert sum("cannot unwrap it" in line for line in report.skipped) == 5
    assert sum("not valid text" in line for line in report.skipped) == 1
    assert sum("is not in container" in line for line in report.skipped) == 1
    sent = sorted(m.content for m in await harness.raw.queue(name).peek())
    assert sent == sorted(
        [
            "raw signal moved by the host",
            "ünïcödé ☃ {",
            "old-format signal",
            "new-format signal",
        ]
    )
    assert await poison.approximate_count() == len(damaged)  # left where they were


async def test_each_message_gets_one_info_line_with_its_outcome(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    harness = await harness_with(backend, {"left": 0})
    name = only_endpoint(harness)
    receipt = await harness.setup_bus.client().send(Flaky(key="k"), to=name, idempotency_key="k")
    [signal] = await harness.raw.queue(name).peek()
    await harness.raw.queue(name).send(signal.content)  # a copy, before the cleanup: resumed

    with caplog.at_level(logging.INFO, "shared.bus.receiver"):
        await harness.run_until_quiet()
        await sweep_all(harness)  # token mode's R7: the token goes
        await harness.raw.queue(name).send(signal.content)  # a copy after it: the duplicate
        await harness.run_until_quiet()

    lines = [r.getMessage() for r in caplog.records if "outcome=" in r.getMessage()]
    assert len(lines) == 3
    prefix = f"endpoint={name} type=Flaky message_id={receipt.message_ids[0]} outcome="
    assert any(line.startswith(prefix + "processed duration_ms=") for line in lines)
    # The copy delivered before the cleanup finds the token claimed by the committed O(m).
    assert any(line.startswith(prefix + "resumed duration_ms=") for line in lines)
    assert any(f"message_id={receipt.message_ids[0]} outcome=duplicate" in x for x in lines)


@pytest.mark.azurite
async def test_a_queue_only_sender_leaves_no_blob_and_no_row_behind(
    azurite: AzuriteEndpoints,
) -> None:
    """The trust table's promise for Storage Queue Data Message Sender, on Azurite: texts
    sent as they are (not base64, as any tool may), too large to be parked beside their
    reason, are parked as excerpts with their digests, and nothing else is written."""
    account = AzureStorageAccount(StorageSettings(connection_string=azurite.connection_string))
    try:
        harness = await harness_with(Backend("azurite", account), {"left": 0})
        name = only_endpoint(harness)
        hostile = ["!" * 60_000, "é" * 15_000]
        async with QueueClient.from_connection_string(azurite.connection_string, name) as sender:
            for text in hostile:
                await sender.send_message(text)

        await harness.run_until_quiet()

        parked = harness.raw.blob_container(harness.config.parked_container)
        assert [b.name async for b in parked.list()] == []
        assert await harness.tokens_in_flight() == []
        assert await harness.row_keys(name) == []
        entries = await harness.raw.queue(poison_queue(name)).peek()
        digests = {unwrap(m.content, name).info["sha256"] for m in entries}
        assert digests == {hashlib.sha256(t.encode()).hexdigest() for t in hostile}
        assert all(len(m.content) < 16_000 for m in entries)  # bounded, whatever was sent
        assert [m.expires_on for m in entries] == [None, None]
    finally:
        await account.close()


async def test_a_parked_original_goes_only_with_its_poison_message(backend: Backend) -> None:
    """``discard`` deletes the poison message first and its original after: when someone
    else received the message since (its pop receipt is stale), the original stays for them."""
    harness = await harness_with(backend, {"left": 0})
    name = only_endpoint(harness)
    container = harness.raw.blob_container(harness.config.parked_container)
    poison = harness.raw.queue(poison_queue(name))
    original = f"{name}/{uuid.uuid4()}"
    await container.upload(original, b"{}", {})
    await poison.send(reference_body(PoisonReason(name, "why", 1), original), time_to_live=-1)
    [stale] = await poison.receive(visibility_timeout=1)
    await backend.elapse(1.5)
    [current] = await poison.receive(visibility_timeout=30)  # another replay took it since

    assert not await discard(poison, stale, container, original)
    assert [b.name async for b in container.list()] == [original]
    assert await discard(poison, current, container, original)
    assert [b.name async for b in container.list()] == []
    assert await poison.approximate_count() == 0
