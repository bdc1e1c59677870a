"""Nothing parked expires, and no parked original outlives its poison message: a message
parked eight days ago (by the bus, or moved by the Functions host with its default lifetime
and re-parked by the cleanup) is still replayed, exactly once; orphan originals are removed
after the grace period, and never while a poison message may still refer to them."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import replace

import pytest

from shared.bus.poison import Reason as PoisonReason
from shared.bus.poison import park, reference_body, repark, replay_report, unwrap
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.parked import HOLD_SECONDS
from shared.cleanup.report import CleanupReport
from shared.cleanup.settings import CleanupSettings
from shared.cleanup.summary import cleanup_summary
from shared.clock import ManualClock
from shared.resources import poison_queue
from shared.stores.instrumented import (
    Fault,
    Instrumentation,
    InstrumentedAccount,
    SimulatedCrash,
    fault_at_first,
)
from shared.stores.memory import MemoryStorageAccount
from tests.bus.harness import Harness
from tests.bus.test_failures import Flaky, flaky_app
from tests.conftest import Backend, unique_name

DAY = 24 * 3600.0


async def memory_harness(failures: dict[str, int], **config: object) -> tuple[Harness, str]:
    clock = ManualClock()
    backend = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    name = f"flaky{unique_name('')[:8]}"
    parked = unique_name("parked")
    harness = await Harness.create(
        backend, flaky_app(name, failures), parked_container=parked, **config
    )
    await harness.raw.blob_container(parked).create_if_missing()
    return harness, name


def clock_of(harness: Harness) -> ManualClock:
    clock = harness.backend.clock
    assert clock is not None
    return clock


async def clean(harness: Harness, **overrides: object) -> CleanupReport:
    cleanup = replace(CleanupSettings(checkpoint_table=unique_name("cleanup")), **overrides)  # type: ignore[arg-type]
    return await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        config=harness.config,
        settings=cleanup,
        rows=harness.cleanup_rows(),
    )


async def tokens_after_a_pass(harness: Harness) -> list[str]:
    """The tokens left once a cleanup pass past the grace period has run: the receiver
    leaves its processed incoming token, claimed, to that pass's R7 (``shared.bus.receiver``)."""
    clock_of(harness).advance(CleanupSettings().grace_seconds + 1)
    await clean(harness)
    return await harness.tokens()


def task(report: CleanupReport, endpoint: str) -> dict[str, dict[str, int]]:
    [found] = [t for t in report.tasks if t.task == f"poison.{endpoint}"]
    assert found.finished, found.skipped
    return {"removed": found.removed, "kept": found.kept, "changed": found.changed}


async def host_moves_to_poison(harness: Harness, name: str) -> str:
    """What the Functions host does after maxDequeueCount: the raw signal to the poison
    queue, with the queue's default time-to-live, and the original deleted."""
    [message] = await harness.raw.queue(name).receive()
    await harness.raw.queue(poison_queue(name)).send(message.content)
    await harness.raw.queue(name).delete(message.id, message.pop_receipt)
    return message.content


async def replay_all_and_process(harness: Harness, name: str) -> int:
    report = await replay_report(harness.raw, name, container=harness.config.parked_container)
    assert report.skipped == []
    await harness.run_until_quiet()
    return report.replayed


async def test_a_message_the_bus_parked_eight_days_ago_is_replayed_exactly_once() -> None:
    failures = {"left": 1}
    harness, name = await memory_harness(failures, max_dequeue_count=1)
    await harness.setup_bus.client().send(Flaky(key="k"), to=name, idempotency_key="k")
    await harness.run_until_quiet()
    [parked] = await harness.raw.queue(poison_queue(name)).peek()
    assert parked.expires_on is None

    clock_of(harness).advance(8 * DAY)
    report = await clean(harness)

    assert task(report, name)["changed"] == {}
    assert await replay_all_and_process(harness, name) == 1
    assert len(await harness.applied(name)) == 1
    assert await harness.tokens_in_flight() == []
    assert await tokens_after_a_pass(harness) == []


async def test_a_message_the_host_moved_is_reparked_by_the_cleanup_and_replayed_once() -> None:
    harness, name = await memory_harness({"left": 0})
    await harness.setup_bus.client().send(Flaky(key="k"), to=name, idempotency_key="k")
    signal = await host_moves_to_poison(harness, name)
    [moved] = await harness.raw.queue(poison_queue(name)).peek()
    assert moved.expires_on is not None  # the host's move: seven days

    clock_of(harness).advance(1.5 * DAY)
    report = await clean(harness)
    clock_of(harness).advance(6.5 * DAY)  # eight days after the move

    assert task(report, name)["changed"] == {"poison_entries_reparked": 1}
    assert ", changed 1 (poison_entries_reparked 1);" in cleanup_summary(report.to_dict())
    [kept] = await harness.raw.queue(poison_queue(name)).peek()
    assert (kept.content, kept.expires_on) == (signal, None)
    assert await replay_all_and_process(harness, name) == 1
    assert len(await harness.applied(name)) == 1
    assert await harness.tokens_in_flight() == []
    assert await tokens_after_a_pass(harness) == []


async def test_an_entry_with_more_than_the_margin_left_waits_for_a_later_pass() -> None:
    harness, name = await memory_harness({"left": 0})
    await harness.setup_bus.client().send(Flaky(key="k"), to=name, idempotency_key="k")
    await host_moves_to_poison(harness, name)

    early = await clean(harness, poison_expiry_margin_seconds=2 * DAY)
    clock_of(harness).advance(5.5 * DAY)
    late = await clean(harness, poison_expiry_margin_seconds=2 * DAY)

    assert task(early, name)["changed"] == {}
    assert task(early, name)["kept"]["parked"] == 1
    assert task(late, name)["changed"] == {"poison_entries_reparked": 1}
    [kept] = await harness.raw.queue(poison_queue(name)).peek()
    assert kept.expires_on is None


async def test_a_crash_between_the_copy_and_the_delete_leaves_two_that_replay_once() -> None:
    """The cleanup sends the copy with no expiry, then dies before deleting the original:
    two entries. The next pass re-parks the original too; eight days after the move both
    are there, and replaying both processes the message once."""
    harness, name = await memory_harness({"left": 0})
    await harness.setup_bus.client().send(Flaky(key="k"), to=name, idempotency_key="k")
    signal = await host_moves_to_poison(harness, name)
    clock_of(harness).advance(1.5 * DAY)
    cleanup = CleanupSettings(checkpoint_table=unique_name("cleanup"))
    dying = InstrumentedAccount(
        harness.raw, Instrumentation(plan=fault_at_first("queue.delete", Fault.CRASH_BEFORE))
    )

    with pytest.raises(SimulatedCrash):
        await run_cleanup(
            dying,
            endpoint_modes(harness.app),
            config=harness.config,
            settings=cleanup,
            rows=harness.cleanup_rows(dying),
        )
    assert await harness.raw.queue(poison_queue(name)).approximate_count() == 2
    clock_of(harness).advance(HOLD_SECONDS + cleanup.lease_seconds)  # its holds and leases end
    report = await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        config=harness.config,
        settings=cleanup,
        rows=harness.cleanup_rows(),
    )
    clock_of(harness).advance(6.5 * DAY)

    assert task(report, name)["changed"] == {"poison_entries_reparked": 1}
    entries = await harness.raw.queue(poison_queue(name)).peek()
    assert [(m.content, m.expires_on) for m in entries] == [(signal, None), (signal, None)]
    assert await replay_all_and_process(harness, name) == 2
    assert len(await harness.applied(name)) == 1
    assert await harness.tokens_in_flight() == []
    assert await tokens_after_a_pass(harness) == []


async def test_a_host_moved_text_too_large_to_send_again_whole_is_kept_as_an_excerpt() -> None:
    """The host moves what it was given: a text sent not base64 may not fit once encoded.
    It is too large to be a signal, so no token waits for it: an excerpt keeps its reason,
    its first characters and its digest."""
    harness, name = await memory_harness({"left": 0})
    text = "!" * 60_000  # 80,000 characters in base64: more than a queue message holds

    form = await repark(harness.raw, name, text)

    assert form == "excerpt"
    [entry] = await harness.raw.queue(poison_queue(name)).peek()
    kept = unwrap(entry.content, name)
    assert kept.excerpt_only
    assert kept.info["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert (entry.expires_on, len(entry.content) < 4_000) == (None, True)


async def test_orphan_parked_originals_go_after_the_grace_period_and_referenced_ones_stay() -> None:
    harness, name = await memory_harness({"left": 0})
    container = harness.raw.blob_container(harness.config.parked_container)
    referenced, orphan = f"{name}/{uuid.uuid4()}", f"{name}/{uuid.uuid4()}"
    other = f"other{unique_name('')[:8]}/{uuid.uuid4()}"  # another endpoint's: not this task's
    for blob in (referenced, orphan, other):
        await container.upload(blob, b"{}", {})
    poison = harness.raw.queue(poison_queue(name))
    await poison.send(reference_body(PoisonReason(name, "why", 1), referenced), time_to_live=-1)

    young = await clean(harness, grace_seconds=600)
    clock_of(harness).advance(601)
    old = await clean(harness, grace_seconds=600)

    assert task(young, name)["kept"] == {"parked": 1, "parked_originals": 1, "young": 1}
    assert task(old, name)["removed"] == {"orphan_parked_originals": 1}
    assert sorted([b.name async for b in container.list()]) == sorted([referenced, other])
    assert await poison.approximate_count() == 1
    [visible] = await poison.peek()  # shown again at the end of the pass
    assert visible.content.endswith(f'"original": "{referenced}"}}}}')


async def test_no_original_is_removed_while_another_reader_holds_poison_messages() -> None:
    """A replay (or the audit) holding an entry hides it from the cleanup's pass: its
    original must not look like an orphan."""
    harness, name = await memory_harness({"left": 0})
    container = harness.raw.blob_container(harness.config.parked_container)
    held = f"{name}/{uuid.uuid4()}"
    await container.upload(held, b"{}", {})
    poison = harness.raw.queue(poison_queue(name))
    await poison.send(reference_body(PoisonReason(name, "why", 1), held), time_to_live=-1)
    clock_of(harness).advance(601)
    [taken] = await poison.receive(visibility_timeout=300)  # by an operator's replay

    report = await clean(harness, grace_seconds=600)

    assert task(report, name)["kept"] == {"unchecked_originals": 1}
    assert [b.name async for b in container.list()] == [held]
    await poison.delete(taken.id, taken.pop_receipt)


async def test_the_bus_parks_with_no_expiry_whole_or_as_an_excerpt(backend: Backend) -> None:
    harness = await Harness.create(backend, flaky_app(f"flaky{unique_name('')[:8]}", {}))
    [name] = harness.app.endpoints
    await harness.raw.blob_container(harness.config.parked_container).create_if_missing()
    reason = PoisonReason(name, "why", 1)
    forms = [
        await park(harness.raw, text, reason, harness.config.parked_container)
        for text in ("small", '"' * 45_000)
    ]

    entries = await harness.raw.queue(poison_queue(name)).peek()

    assert forms == ["inline", "excerpt"]
    assert [m.expires_on for m in entries] == [None, None]


async def test_the_cleanup_reparks_and_removes_orphans_on_every_backend(backend: Backend) -> None:
    """On Azurite too: the expiry a receive reports, the copy with no expiry, the orphan
    removed and the referenced original kept (a margin of seven days takes the host's move
    at once; the job's clock runs ahead of the emulator's whole-second timestamps)."""
    harness = await Harness.create(backend, flaky_app(f"flaky{unique_name('')[:8]}", {}))
    [name] = harness.app.endpoints
    container = harness.raw.blob_container(harness.config.parked_container)
    await container.create_if_missing()
    await harness.setup_bus.client().send(Flaky(key="k"), to=name, idempotency_key="k")
    signal = await host_moves_to_poison(harness, name)
    referenced, orphan = f"{name}/{uuid.uuid4()}", f"{name}/{uuid.uuid4()}"
    for blob in (referenced, orphan):
        await container.upload(blob, b"{}", {})
    await harness.raw.queue(poison_queue(name)).send(
        reference_body(PoisonReason(name, "why", 1), referenced), time_to_live=-1
    )
    base = harness.config.clock
    ahead = replace(harness.config, clock=lambda: base() + 2.0)

    report = await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        config=ahead,
        rows=harness.cleanup_rows(),
        settings=CleanupSettings(
            checkpoint_table=unique_name("cleanup"),
            grace_seconds=0,
            poison_expiry_margin_seconds=7 * DAY,
        ),
    )

    assert task(report, name) == {
        "removed": {"orphan_parked_originals": 1},
        "kept": {"parked": 2, "parked_originals": 1},  # the copy is read in the same pass
        "changed": {"poison_entries_reparked": 1},
    }
    # Other tests' endpoints park in the same container of the shared emulator.
    assert [b.name async for b in container.list(f"{name}/")] == [referenced]
    entries = await harness.raw.queue(poison_queue(name)).peek()
    assert [m.expires_on for m in entries] == [None, None]
    assert signal in [m.content for m in entries]
