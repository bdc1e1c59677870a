"""The cleanup job's payload task (``shared.cleanup.payloads``): it runs with the job's other
tasks, is reported like them, removes the payload of a publish once its tokens are consumed
and deleted (by the outbox task's R7: ``shared.bus.receiver``), and the payload of a round
that crashed before creating its tokens (fencing its O(m)) once the grace period has passed,
without costing the message anything."""

from __future__ import annotations

from dataclasses import replace

from shared.bus import Outcome
from shared.bus.records import OutboxRecord
from shared.cleanup.base import CleanupContext
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.payloads import SharedPayloads
from shared.cleanup.report import CleanupReport, TaskReport
from shared.cleanup.settings import CleanupSettings
from shared.cleanup.tasks import standard_tasks
from shared.clock import to_datetime
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer, BlobPage
from shared.stores.delegating import DelegatingAccount, DelegatingBlobContainer
from shared.stores.instrumented import Fault, fault_at_first
from tests.bus.test_shared_payloads import EXPECTED, Shout, Shouting
from tests.bus.test_sweep import sweep_all
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

    # The consumed tokens (the hub's incoming one and the three subscribers') go with their
    # records, in the outbox tasks' R7; the payload task, running beside them, may have
    # judged the payload before they went: then the next pass removes it.
    assert report.removed()["incoming_tokens"] == 4
    assert report.removed()["outbox_records"] == 4
    removed = report.removed()["payloads"]
    if removed == 0:
        assert report.kept()["tokens_waiting"] == 1
        removed = (await clean(shouting)).removed()["payloads"]
    assert removed == 1
    assert await shouting.payload_names() == []
    assert await shouting.heard() == {ear: [EXPECTED] for ear in shouting.ears}


async def test_a_crashed_rounds_payload_is_fenced_off_and_removed(backend: Backend) -> None:
    """The hub's round writes the payload and crashes at its first token create, while its
    other creates may already be on the wire and land (they do on Azurite, more often than
    not): the job fences the uncommitted O(m) and removes the payload once the round's
    tokens are gone, in the pass that removes them or the next. The redelivered message
    writes it again, and every subscriber gets the body once."""
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
    landed = await _hub_tokens(shouting)  # siblings of the crashed create: 0 to 2

    removed = (await clean(shouting)).removed()
    if removed["payloads"] == 0:  # the pass judged the payload before it removed the tokens
        assert landed
        removed.update((await clean(shouting)).removed())

    assert removed["payloads"] == 1
    assert await _hub_tokens(shouting) == []
    [fenced] = await harness.outbox_records(shouting.hub)
    assert _fenced(record, fenced)
    harness.instrumentation.plan = lambda _: None
    await harness.run_until_quiet()
    assert harness.outcomes[Outcome.PROCESSED] == 4  # the hub once, each subscriber once
    assert await shouting.heard() == {ear: [EXPECTED] for ear in shouting.ears}


async def _hub_tokens(shouting: Shouting) -> list[str]:
    page = await shouting.tokens.list_page(f"{shouting.hub}/")
    return [blob.name for blob in page.items]


def _fenced(before: OutboxRecord, after: OutboxRecord) -> bool:
    """Rewritten unchanged: the same claim, a new ETag."""
    return after.claim == before.claim and after.etag != before.etag


class RewrittenWhileJudged(DelegatingAccount):
    """The account a pass uses, on which a round rewrites the payload (as every round that
    may refer to it does) right after the pass's token listing: between its judgement and
    its delete."""

    def __init__(self, inner: StorageAccount, shouting: Shouting) -> None:
        super().__init__(inner)
        self.shouting = shouting

    def blob_container(self, name: str) -> BlobContainer:
        container = self.inner.blob_container(name)
        if name != self.shouting.harness.config.tokens_container:
            return container
        return _ListingThenRewrite(container, self.shouting)


class _ListingThenRewrite(DelegatingBlobContainer):
    def __init__(self, inner: BlobContainer, shouting: Shouting) -> None:
        super().__init__(inner)
        self.shouting = shouting

    async def list_page(
        self, prefix: str = "", *, page_size: int = 1000, continuation: str | None = None
    ) -> BlobPage:
        page = await super().list_page(prefix, page_size=page_size, continuation=continuation)
        for name in await self.shouting.payload_names():
            payload = await self.shouting.payloads.read(name)
            await self.shouting.payloads.upload(name, payload.data, payload.metadata)
        return page


async def test_a_payload_rewritten_after_its_judgement_stays(backend: Backend) -> None:
    """The delete is If-Match the ETag the pass judged: the round that rewrote it wins."""
    shouting = await Shouting.create(backend)
    await shouting.shout()
    await shouting.harness.run_until_quiet()
    await sweep_all(shouting.harness)  # R7: the consumed tokens go, the payload is judged alone
    await backend.elapse(1.5)
    harness = shouting.harness
    context = CleanupContext(
        RewrittenWhileJudged(harness.raw, shouting),
        harness.config,
        CleanupSettings(grace_seconds=1, page_size=1000),
        harness.cleanup_rows(),
        to_datetime(harness.config.clock()),
    )
    report = TaskReport("payloads")

    await SharedPayloads().run_page(context, None, report)

    assert (report.removed, report.kept) == ({}, {"changed": 1})
    assert len(await shouting.payload_names()) == 1


async def test_every_round_rewrites_its_payload(backend: Backend) -> None:
    """A round that refers to a payload written long ago by a round that crashed writes it
    again (create or overwrite, not create-if-absent): its age then counts from this round."""
    shouting = await Shouting.create(backend)
    harness = shouting.harness
    await harness.setup_bus.client().send(Shout(key="k"), to=shouting.hub, idempotency_key="r")
    harness.instrumentation.plan = fault_at_first("blob.create", Fault.CRASH_BEFORE)
    [message] = await harness.raw.queue(shouting.hub).receive()
    await harness.deliver(shouting.hub, message)
    [name] = await shouting.payload_names()
    first = await shouting.payloads.get_properties(name)
    await backend.elapse(1.5)
    harness.instrumentation.plan = lambda _: None

    await shouting.deliver(shouting.hub)

    again = await shouting.payloads.get_properties(name)
    assert again.etag != first.etag
    assert again.last_modified > first.last_modified
