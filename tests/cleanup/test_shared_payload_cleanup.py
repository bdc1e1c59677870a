"""The cleanup job's payload task (``shared.cleanup.payloads``): it runs with the job's other
tasks, is reported like them, removes the payload of a publish once its tokens are consumed,
and the payload of a round that crashed before creating its tokens (fencing its O(m)) once
the grace period has passed, without costing the message anything."""

from __future__ import annotations

from dataclasses import replace

from shared.bus import Outcome
from shared.bus.records import OutboxRecord
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.report import CleanupReport
from shared.cleanup.settings import CleanupSettings
from shared.cleanup.tasks import standard_tasks
from shared.stores.instrumented import Fault, fault_at_first
from tests.bus.test_shared_payloads import EXPECTED, Shout, Shouting
from tests.conftest import Backend, unique_name


async def clean(shouting: Shouting, ahead: float = 2.0) -> CleanupReport:
    """The job, its clock ``ahead`` of the stores' and a zero grace period."""
    harness = shouting.harness
    base = harness.config.clock
    return await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=replace(harness.config, clock=lambda: base() + ahead),
        settings=CleanupSettings(grace_seconds=0, checkpoint_table=unique_name("cleanup")),
    )


def test_the_job_runs_the_payload_task_with_the_others() -> None:
    assert "payloads" in [task.id for task in standard_tasks(["orders"])]


async def test_the_job_removes_a_publishs_payload_once_its_tokens_are_consumed(
    backend: Backend,
) -> None:
    shouting = await Shouting.create(backend)
    await shouting.shout()
    assert (await clean(shouting)).removed()["payloads"] == 0  # three tokens wait

    await shouting.harness.run_until_quiet()
    report = await clean(shouting)

    assert report.removed()["payloads"] == 1
    assert await shouting.payload_names() == []
    assert await shouting.heard() == {ear: [EXPECTED] for ear in shouting.ears}


async def test_a_crashed_rounds_payload_is_fenced_off_and_removed(backend: Backend) -> None:
    """The hub's round writes the payload and crashes before its first token: the job
    fences the uncommitted O(m) and removes the payload; the redelivered message writes it
    again, and every subscriber gets the body once."""
    shouting = await Shouting.create(backend)
    harness = shouting.harness
    await harness.setup_bus.client().send(Shout(key="k"), to=shouting.hub, idempotency_key="c")
    harness.instrumentation.plan = fault_at_first("blob.create", Fault.CRASH_BEFORE)
    [message] = await harness.raw.queue(shouting.hub).receive()
    await harness.deliver(shouting.hub, message)  # crashes, and the message comes back
    assert harness.crashes == 1
    [record] = await harness.outbox_records(shouting.hub)
    assert not record.committed
    assert len(await shouting.payload_names()) == 1

    report = await clean(shouting)

    assert report.removed()["payloads"] == 1
    [fenced] = await harness.outbox_records(shouting.hub)
    assert _fenced(record, fenced)
    harness.instrumentation.plan = lambda _: None
    await harness.run_until_quiet()
    assert harness.outcomes[Outcome.PROCESSED] == 4  # the hub once, each subscriber once
    assert await shouting.heard() == {ear: [EXPECTED] for ear in shouting.ears}


def _fenced(before: OutboxRecord, after: OutboxRecord) -> bool:
    """Rewritten unchanged: the same claim, a new ETag."""
    return after.claim == before.claim and after.etag != before.etag
