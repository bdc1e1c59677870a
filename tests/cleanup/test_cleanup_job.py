"""The cleanup job: bounded residue, never a signalled token, resumable, many instances."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import timedelta

import pytest

from shared.bus.config import BusConfig
from shared.bus.envelope import token_name, token_prefix
from shared.bus.ids import fresh_id
from shared.bus.ingress import INGRESS_ROW, IngressClient
from shared.bus.modes.processed_table import processed_row
from shared.bus.origin import Origin
from shared.bus.records import OutboxRecord, outbox_row
from shared.cleanup.abandoned_tokens import AbandonedTokens
from shared.cleanup.checkpoint import TASK_PARTITION, Checkpoints, LeaseLost
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.outbox_records import OutboxRecords
from shared.cleanup.report import CleanupReport
from shared.cleanup.settings import CleanupSettings
from shared.cleanup.tasks import standard_tasks
from shared.clock import ManualClock, to_datetime
from shared.config import build_config
from shared.errors import ConfigurationError, OutcomeUnknown
from shared.resources import TABLES
from shared.stores.account import StorageAccount
from shared.stores.instrumented import (
    Fault,
    InstrumentedAccount,
    Operation,
    SimulatedCrash,
    fault_at_first,
)
from shared.stores.memory import MemoryStorageAccount
from shared.stores.table import Entity
from tests.bus.flow import FlowNames, PlaceOrder, build_flow
from tests.bus.harness import Harness
from tests.conftest import Backend, sample_settings, unique_name


def settings(**overrides: object) -> CleanupSettings:
    base = CleanupSettings(grace_seconds=0, checkpoint_table=unique_name("cleanup"))
    return replace(base, **overrides)  # type: ignore[arg-type]


async def clean(
    harness: Harness,
    cleanup: CleanupSettings,
    *,
    ahead: float = 2.0,
    owner: str | None = None,
    account: StorageAccount | None = None,
) -> CleanupReport:
    """Run the job with its clock ``ahead`` of the stores', so that on Azurite (whose
    timestamps are the server's, in whole seconds) 'older than a zero grace' is certain;
    over ``account`` (one that injects faults, say) instead of the harness's own."""
    base = harness.config.clock
    config = replace(harness.config, clock=lambda: base() + ahead)
    return await run_cleanup(
        account or harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(account),
        config=config,
        settings=cleanup,
        owner=owner,
    )


async def residue(harness: Harness) -> tuple[int, int]:
    records = sum([len(await harness.outbox_records(e)) for e in harness.app.endpoints])
    return records, len(await harness.tokens())


async def new_flow(
    backend: Backend, *, publish: bool = True, charge: bool = True
) -> tuple[Harness, FlowNames]:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, publish=publish, charge=charge))
    return harness, names


async def place_order(harness: Harness, names: FlowNames, order: str = "o") -> None:
    await harness.setup_bus.client().send(
        PlaceOrder(order_id=order, amount=1), to=names.orders, idempotency_key=f"k-{order}"
    )


@pytest.mark.parametrize("fault", [Fault.CRASH_AFTER, Fault.ERROR_AFTER])
async def test_one_run_after_quiescence_leaves_no_tokens_or_outbox_records(
    backend: Backend, fault: Fault
) -> None:
    # Given a flow whose first token create crashed after landing (or lost its response)
    harness, names = await new_flow(backend, publish=False)
    await place_order(harness, names)
    harness.instrumentation.plan = fault_at_first("blob.create", fault)
    await harness.run_until_quiet()
    assert [op.kind for op, _ in harness.instrumentation.injected] == ["blob.create"]
    # The abandoned token, and the three processed incoming tokens, each claimed by its
    # O(m) until the cleanup's R7.
    assert await residue(harness) == (3, 4)
    assert len(await harness.tokens_in_flight()) == 1

    # When one cleanup run completes
    report = await clean(harness, settings())

    # Then nothing is left but the business state
    assert report.complete
    assert report.removed() == {"abandoned_tokens": 1, "incoming_tokens": 3, "outbox_records": 3}
    assert await residue(harness) == (0, 0)
    assert len(await harness.applied(names.shipping)) == 1


async def test_a_signalled_token_still_in_flight_is_never_removed(backend: Backend) -> None:
    harness, names = await new_flow(backend, publish=False)
    await place_order(harness, names)
    [message] = await harness.raw.queue(names.orders).receive()
    await harness.deliver(names.orders, message)  # orders done; ChargeCard waits in its queue
    [in_flight] = await harness.tokens_in_flight()
    [record] = await harness.outbox_records(names.orders)

    report = await clean(harness, settings())

    # O(orders) waits for the token it committed to be consumed before it retires, and
    # its own incoming token (R7, the cleanup's) waits with it.
    assert sorted(await harness.tokens()) == sorted([in_flight, record.incoming_token])
    assert report.removed() == {}
    assert report.kept()["in_flight"] == 1
    assert report.kept()["outputs_in_flight"] == 1
    await harness.run_until_quiet()
    assert len(await harness.applied(names.shipping)) == 1
    await clean(harness, settings())
    assert await residue(harness) == (0, 0)


async def test_a_create_landing_after_its_record_retired_is_removed_after_the_grace(
    backend: Backend,
) -> None:
    # Given a message fully processed and cleaned up
    harness, names = await new_flow(backend, publish=False, charge=False)
    await place_order(harness, names)
    await harness.run_until_quiet()
    [record] = await harness.outbox_records(names.orders)
    await clean(harness, settings())
    assert await residue(harness) == (0, 0)

    # When a create from an abandoned attempt lands late, after O(m) was retired
    late = token_name(names.orders, record.message_id, fresh_id(), fresh_id(), b"{}")
    origin = Origin(names.orders, record.partition_key, outbox_row(record.message_id))
    await harness.raw.blob_container(harness.config.tokens_container).create(
        late, b"{}", {"claim": "", "origin": origin.encode()}
    )

    # Then it is kept while younger than the grace period, and removed after it
    young = await clean(harness, settings(grace_seconds=600))
    assert young.kept()["young"] == 1
    assert await harness.tokens() == [late]
    old = await clean(harness, settings(grace_seconds=600), ahead=601)
    assert old.removed() == {"abandoned_tokens": 1}
    assert await harness.tokens() == []


async def leave_stray_token(harness: Harness, names: FlowNames, record: OutboxRecord) -> str:
    """A token another round of ``record``'s message left under its prefix, unrecorded (its
    create landed, its round never committed); returns its name."""
    stray = token_name(names.orders, record.message_id, fresh_id(), fresh_id(), b"{}")
    origin = Origin(names.orders, record.partition_key, outbox_row(record.message_id))
    await harness.raw.blob_container(harness.config.tokens_container).create(
        stray, b"{}", {"claim": "", "origin": origin.encode()}
    )
    return stray


async def outbox_pass(
    harness: Harness, names: FlowNames, counting: InstrumentedAccount
) -> CleanupReport:
    """The outbox task of orders alone, its requests counted, just past the commit."""
    return await run_cleanup(
        counting,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(counting),
        config=replace(harness.config, clock=lambda: harness.config.clock() + 2),
        settings=settings(),
        tasks=[OutboxRecords(names.orders)],
    )


async def test_a_record_that_committed_no_output_goes_unlisted_and_a_stray_token_still_goes(
    backend: Backend,
) -> None:
    """A handler that sends nothing commits an O(m) with no outputs and no abandoned tokens:
    the outbox task retires it without listing its prefix (a List Blobs saved per message).
    A token some other round of the message left there unrecorded (its create landed, its
    round never committed) is then the tokens task's, which finds O(m) gone: proof it was
    never committed."""
    # Given a message whose handler sent nothing, and a stray token of another of its rounds
    harness, names = await new_flow(backend, publish=False, charge=False)
    await place_order(harness, names)
    await harness.run_until_quiet()
    [record] = await harness.outbox_records(names.orders)
    assert (record.outgoing, record.abandoned) == ((), ())
    stray = await leave_stray_token(harness, names, record)
    counting = InstrumentedAccount(harness.raw)

    # When the outbox task alone runs
    outbox = await outbox_pass(harness, names, counting)

    # Then it retires O(m) and deletes its incoming token (R7) without a listing
    assert outbox.removed() == {"incoming_tokens": 1, "outbox_records": 1}
    assert "blob.list" not in counting.instrumentation.kinds_since(0)
    assert await harness.tokens() == [stray]
    # And the tokens task, finding O(m) gone, deletes the stray token
    tokens = await clean(harness, settings())
    assert tokens.removed() == {"abandoned_tokens": 1}
    assert await residue(harness) == (0, 0)


async def test_a_record_with_an_output_still_lists_its_prefix(backend: Backend) -> None:
    """An O(m) that committed an output is retired only once that output is claimed or gone,
    which a listing of its prefix shows; the listing also clears what other rounds left."""
    harness, names = await new_flow(backend, publish=False)
    await place_order(harness, names)
    await harness.run_until_quiet()
    [record] = await harness.outbox_records(names.orders)
    stray = await leave_stray_token(harness, names, record)
    counting = InstrumentedAccount(harness.raw)

    report = await outbox_pass(harness, names, counting)

    prefix = f"{harness.config.tokens_container}/{token_prefix(names.orders, record.message_id)}"
    listings = [op.target for op in counting.instrumentation.operations if op.kind == "blob.list"]
    assert listings == [prefix]
    assert report.removed() == {
        "abandoned_tokens": 1,
        "incoming_tokens": 1,
        "outbox_records": 1,
    }
    assert stray not in await harness.tokens()


async def test_tokens_of_a_client_that_crashed_before_its_record_are_removed(
    backend: Backend,
) -> None:
    harness, names = await new_flow(backend, publish=False, charge=False)
    client = IngressClient(
        harness.account,
        harness.setup_bus.topics,
        harness.config,
        "cli",
        routes=harness.app.routes,
    )
    # Ingress reads its record, creates the token, then writes the record: crash before that.
    harness.instrumentation.plan = fault_at_first("table.insert", Fault.CRASH_BEFORE)
    with pytest.raises(SimulatedCrash):
        await client.send(PlaceOrder(order_id="o", amount=1), to=names.orders, idempotency_key="k")
    [orphan] = await harness.tokens()
    assert orphan.startswith("cli/")

    report = await clean(harness, settings())

    assert report.removed() == {"abandoned_tokens": 1}
    assert await harness.tokens() == []
    assert await harness.raw.queue(names.orders).approximate_count() == 0


async def test_ingress_records_go_after_their_window_once_their_tokens_are_consumed(
    backend: Backend,
) -> None:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(
        backend, build_flow(names, publish=False, charge=False), ingress_window_seconds=60
    )
    await place_order(harness, names)
    ingress = harness.raw.table(harness.config.ingress_table)

    within = await clean(harness, settings())
    assert within.kept()["within_window"] == 1
    past_but_pending = await clean(harness, settings(), ahead=61)
    assert past_but_pending.kept()["outputs_in_flight"] == 1
    assert len([e async for e in ingress.query_all(row_keys=[INGRESS_ROW])]) == 1

    await harness.run_until_quiet()
    done = await clean(harness, settings(), ahead=61)

    assert done.removed()["ingress_records"] == 1
    assert [e async for e in ingress.query_all(row_keys=[INGRESS_ROW])] == []


async def test_audit_rows_are_kept_for_their_retention_and_no_longer(backend: Backend) -> None:
    harness, names = await new_flow(backend, publish=False, charge=False)
    for order in ("a", "b"):
        await place_order(harness, names, order)
    await harness.run_until_quiet()
    day = 24 * 3600.0

    kept = await clean(harness, settings(audit_retention_seconds=day))
    assert kept.kept()["within_retention"] == 2
    removed = await clean(harness, settings(audit_retention_seconds=day), ahead=day + 5)

    assert removed.removed()["audit_rows"] == 2
    assert await harness.audit_ids(names.orders) == []
    assert sorted(await harness.applied(names.orders)) != []  # state is never touched


async def test_a_run_out_of_budget_saves_its_place_and_the_next_run_resumes(
    backend: Backend,
) -> None:
    harness, names = await new_flow(backend, publish=False, charge=False)
    for order in "abcde":
        await place_order(harness, names, order)
    await harness.run_until_quiet()
    assert await residue(harness) == (5, 5)  # each token claimed by its O(m) until R7
    assert await harness.tokens_in_flight() == []
    tiny = settings(page_size=2, budget_seconds=0)

    task = f"outbox.{names.orders}"
    runs: list[CleanupReport] = []
    while not any(t.task == task and t.finished for r in runs for t in r.tasks):
        runs.append(await clean(harness, tiny))
        assert len(runs) < 20

    # Every task did one page in every run: a zero budget still gives each task its share,
    # so the backlog of one never starves the others. The interrupted task resumed each time
    # where it stopped.
    assert len(runs) == 3
    assert all(t.pages == 1 for r in runs for t in r.tasks)
    orders = [t for r in runs for t in r.tasks if t.task == task]
    assert [(t.finished, t.resumed) for t in orders] == [
        (False, False),
        (False, True),
        (True, True),
    ]
    # A task with nothing to do finishes in the first run. (The tokens task has the five
    # processed tokens to list now, claimed until the outbox task's R7: it is never the one
    # to remove them.)
    assert [t.finished for t in runs[0].tasks if t.task == "payloads"] == [True]
    assert sum(r.removed()["abandoned_tokens"] for r in runs) == 0
    assert sum(r.removed()["outbox_records"] for r in runs) == 5
    assert sum(r.removed()["incoming_tokens"] for r in runs) == 5
    assert await residue(harness) == (0, 0)


async def test_a_task_leased_by_a_live_instance_is_skipped_and_resumed_when_it_lapses(
    backend: Backend,
) -> None:
    harness, names = await new_flow(backend, publish=False, charge=False)
    for order in "abc":
        await place_order(harness, names, order)
    await harness.run_until_quiet()
    cleanup = settings(page_size=1, lease_seconds=30)
    table = harness.raw.table(cleanup.checkpoint_table)
    await table.create_if_missing()
    checkpoints = Checkpoints(table, cleanup.lease_seconds)
    task = f"outbox.{names.orders}"
    now = to_datetime(time.time() if backend.clock is None else backend.clock())

    # Given another instance that took the task, did one page, and went silent
    held = await checkpoints.acquire(task, "dead-instance", now)
    assert held is not None
    first_page = await harness.raw.table(names.orders).query(row_key_prefix="outbox|", page_size=1)
    await checkpoints.advance(held, first_page.continuation, now)

    # When another instance runs while the lease is live, it leaves the task alone
    during = await clean(harness, cleanup, ahead=5, owner="live-instance")
    [skipped] = [t for t in during.tasks if t.task == task]
    assert skipped.skipped == "leased by another instance"
    assert len(await harness.outbox_records(names.orders)) == 3

    # Then once the lease lapses, it resumes from the dead instance's checkpoint, carries on
    # to the end, and goes round once more from the start: one pass covers every record.
    after = await clean(harness, cleanup, ahead=40, owner="live-instance")
    [resumed] = [t for t in after.tasks if t.task == task]
    assert resumed.finished
    assert resumed.resumed
    assert resumed.removed["outbox_records"] == 3
    saved = await table.get(TASK_PARTITION, task)
    assert saved["owner"] == "live-instance"
    assert saved["continuation"] == ""


async def test_instances_running_at_once_share_the_work_and_remove_everything_once(
    backend: Backend,
) -> None:
    harness, names = await new_flow(backend)
    for order in "abcd":
        await place_order(harness, names, order)
    await harness.run_until_quiet()
    records, _ = await residue(harness)
    cleanup = settings(page_size=1)

    reports = await asyncio.gather(
        *(clean(harness, cleanup, owner=f"instance-{i}") for i in range(3))
    )

    removed = sum(r.removed()["outbox_records"] for r in reports)
    if removed < records:  # a task may have been leased by a sibling still running: rerun
        reports.append(await clean(harness, cleanup, owner="instance-late", ahead=200))
    assert sum(r.removed()["outbox_records"] for r in reports) == records
    assert await residue(harness) == (0, 0)


async def test_a_token_whose_origin_names_a_foreign_table_is_left_alone(
    backend: Backend,
) -> None:
    harness, _ = await new_flow(backend, publish=False, charge=False)
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    name = token_name("orders", fresh_id(), fresh_id(), fresh_id(), b"{}")
    await tokens.create(name, b"{}", {"origin": Origin("secrets", "p", "r").encode()})

    report = await clean(harness, settings(), owner="x")

    assert report.kept()["bad_origin"] == 1
    assert await harness.tokens() == [name]


async def test_a_token_of_another_app_is_kept_for_its_own_cleanup_without_a_warning(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """The tokens container is shared by the apps of a system: a well-formed origin in a table
    that is not this app's is another app's token, neither judged nor reported as bad; only
    metadata that is no origin of this bus is."""
    harness, _ = await new_flow(backend, publish=False, charge=False)
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    theirs = token_name("shipping", fresh_id(), fresh_id(), fresh_id(), b"{}")
    origin = Origin("shippingdispatch", "o1", outbox_row(fresh_id())).encode()
    await tokens.create(theirs, b"{}", {"origin": origin})
    forged = token_name("orders", fresh_id(), fresh_id(), fresh_id(), b"{}")
    await tokens.create(forged, b"{}", {"origin": "no|origin"})

    with caplog.at_level("WARNING"):
        report = await clean(harness, settings(), owner="x")

    assert report.kept()["other_app"] == 1
    assert report.kept()["bad_origin"] == 1
    assert sorted(await harness.tokens()) == sorted([theirs, forged])
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [line for line in warned if "origin" in line and forged in line]
    assert not [line for line in warned if theirs in line]


async def test_one_failing_task_does_not_stop_the_others(backend: Backend) -> None:
    harness, names = await new_flow(backend, publish=False, charge=False)
    await place_order(harness, names)
    await harness.run_until_quiet()

    class Broken(AbandonedTokens):
        async def run_page(self, *args: object) -> str | None:
            raise OutcomeUnknown("storage timed out")

    tasks = [Broken(), *standard_tasks(endpoint_modes(harness.app))[1:]]
    report = await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=replace(harness.config, clock=lambda: harness.config.clock() + 2),
        settings=settings(),
        tasks=tasks,
    )

    assert report.tasks[0].skipped == "error: storage timed out"
    assert not report.complete
    assert report.removed()["outbox_records"] == 1


def test_settings_come_from_app_settings_with_clear_errors() -> None:
    parsed = build_config(
        sample_settings(
            CLEANUP_GRACE_SECONDS="900", CLEANUP_PAGE_SIZE="50", CLEANUP_BUDGET_SECONDS=""
        )
    ).cleanup
    assert (parsed.grace_seconds, parsed.page_size, parsed.budget_seconds) == (900, 50, 240)
    assert parsed.checkpoint_table == TABLES["cleanup"]
    with pytest.raises(ConfigurationError, match=r"CLEANUP_GRACE_SECONDS.*a number of seconds"):
        build_config(sample_settings(CLEANUP_GRACE_SECONDS="ten minutes"))
    with pytest.raises(ConfigurationError, match=r"CLEANUP_CONCURRENCY.*from 1 to 64"):
        build_config(sample_settings(CLEANUP_CONCURRENCY="65"))
    with pytest.raises(ConfigurationError, match="page_size"):
        CleanupSettings(page_size=0)
    with pytest.raises(ConfigurationError, match="grace_seconds"):
        CleanupSettings(grace_seconds=-1)


async def test_a_window_mode_token_outliving_its_rows_retention_is_kept_not_guessed(
    backend: Backend,
) -> None:
    # Processed-message rows expire after their retention whether or not the tokens they
    # committed were consumed, so a missing row only proves abandonment for a younger token.
    harness, names = await new_flow(backend, publish=False, charge=False)
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    week = harness.config.processed_retention_seconds

    async def orphan() -> str:
        incoming = fresh_id()
        name = token_name(names.orders, incoming, fresh_id(), fresh_id(), b"{}")
        origin = Origin(names.orders, "p", processed_row(incoming))
        await tokens.create(name, b"{}", {"claim": "", "origin": origin.encode()})
        return name

    await orphan()
    assert (await clean(harness, settings())).removed() == {"abandoned_tokens": 1}
    old = await orphan()
    report = await clean(harness, settings(), ahead=week + 10)
    assert report.kept()["origin_expired"] == 1
    assert await harness.tokens() == [old]


@pytest.mark.parametrize(
    ("mode", "kind", "prefix"),
    [
        ("processed_messages", "processed_rows", "processed|"),
        ("state_based", "state_versions", "version|"),
        ("entity_outbox", "entity_outbox_entries", None),
    ],
)
async def test_window_modes_keep_their_dedup_data_for_the_retention_and_no_longer(
    mode: str, kind: str, prefix: str | None
) -> None:
    clock = ManualClock()
    memory = Backend("memory", MemoryStorageAccount(clock=clock), clock)
    names = FlowNames.with_suffix(unique_name("")[:8])
    flow = build_flow(names, publish=False, charge=False, mode=mode)  # type: ignore[arg-type]
    harness = await Harness.create(memory, flow)
    for key in ("k1", "k2", "k3"):  # three versions of one partition's state
        await harness.setup_bus.client().send(
            PlaceOrder(order_id="same", amount=1), to=names.orders, idempotency_key=key
        )
    await harness.run_until_quiet()
    endpoints = endpoint_modes(harness.app)
    retention = {
        "processed_messages": harness.config.processed_retention_seconds,
        "state_based": harness.config.state_stream_retention_seconds,
        "entity_outbox": harness.config.entity_outbox_retention_seconds,
    }[mode]

    async def run(ahead: float) -> CleanupReport:
        base = harness.config.clock
        return await run_cleanup(
            harness.raw,
            endpoints,
            rows=harness.cleanup_rows(),
            config=replace(harness.config, clock=lambda: base() + ahead),
            settings=settings(),
        )

    within = await run(60)
    assert within.removed()[kind] == 0
    assert await harness.tokens() == []
    after = await run(retention + 60)
    assert after.removed()[kind] > 0
    if prefix is not None:
        rows = [e async for e in harness.raw.table(names.orders).query_all(row_key_prefix=prefix)]
        assert len(rows) < 3


async def test_bad_rows_are_skipped_and_reported_and_the_pass_still_finishes(
    backend: Backend,
) -> None:
    """Rows a hostile signal or a damaged table could leave: an outbox record whose incoming
    token name ends in a newline (once accepted by the token-name check), records with
    malformed fields, an ingress record without its sender. The good rows around them are
    still cleaned, and every task finishes."""
    harness, names = await new_flow(backend, publish=False, charge=False)
    table = harness.raw.table(names.orders)
    old = to_datetime(harness.config.clock() - 3600)
    token = token_name(names.orders, fresh_id(), fresh_id(), fresh_id(), b"{}")

    def outbox(partition: str, **fields: object) -> Entity:
        properties: dict[str, object] = {
            "claim": "c",
            "status": "claimed",
            "incoming": token,
            "started_at": old,
            "outgoing": "[]",
            "abandoned": "[]",
            **fields,
        }
        return Entity(partition, outbox_row(fresh_id()), properties)  # type: ignore[arg-type]

    bad = [
        outbox("a1", incoming=token + "\n"),
        outbox("a2", status="weird"),
        outbox("a3", started_at="yesterday"),
        outbox("a4", status="committed", committed_at=old, outgoing="not json"),
        outbox("a5", status="committed", committed_at=old, outgoing='[{"token": 1}]'),
    ]
    for entity in [*bad, outbox("b-unused")]:
        await table.insert(entity)
    ingress = harness.raw.table(harness.config.ingress_table)
    await ingress.insert(Entity("key-a", INGRESS_ROW, {"outgoing": "[]"}))

    report = await clean(harness, settings())

    assert report.complete
    assert report.removed()["unused_outbox_records"] == 1  # the good row past the bad ones
    assert report.kept()["bad_row"] == len(bad) + 1
    [outbox_task] = [t for t in report.tasks if t.task == f"outbox.{names.orders}"]
    assert len(outbox_task.bad_rows) == len(bad)
    assert f"{names.orders} 'a1'/" in outbox_task.bad_rows[0]
    assert "InvalidName" in outbox_task.bad_rows[0]
    assert outbox_task.to_dict()["bad_rows"] == outbox_task.bad_rows
    assert all("\n" not in line for line in outbox_task.bad_rows)  # one line each
    left = [e.partition_key async for e in table.query_all(row_key_prefix="outbox|")]
    assert sorted(left) == ["a1", "a2", "a3", "a4", "a5"]  # reported, left for an operator


async def test_a_token_without_origin_goes_once_older_than_the_ingress_window_and_unclaimed(
    backend: Backend,
) -> None:
    harness, _ = await new_flow(backend, publish=False, charge=False)
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    names = {
        claim: token_name("orders", fresh_id(), fresh_id(), fresh_id(), b"{}")
        for claim in ("", "c")
    }
    for claim, name in names.items():
        await tokens.create(name, b"{}", {"claim": claim})
    window = 60.0
    config = replace(harness.config, ingress_window_seconds=window)

    async def run(ahead: float) -> CleanupReport:
        base = harness.config.clock
        return await run_cleanup(
            harness.raw,
            endpoint_modes(harness.app),
            rows=harness.cleanup_rows(),
            config=replace(config, clock=lambda: base() + ahead),
            settings=settings(),
        )

    within = await run(2)
    assert within.kept()["no_origin"] == 2
    past = await run(window + 2)
    assert past.removed() == {"abandoned_tokens": 1}
    assert past.kept()["no_origin"] == 1  # claimed: signalled once, never the cleanup's
    assert await harness.tokens() == [names["c"]]


async def test_the_heartbeat_keeps_a_lease_through_a_page_longer_than_the_lease() -> None:
    lease = 1.0

    class SlowTask(AbandonedTokens):
        async def run_page(self, *args: object) -> str | None:
            await asyncio.sleep(3 * lease)
            return None

    account = MemoryStorageAccount()
    config = BusConfig(clock=time.time)
    cleanup = settings(lease_seconds=lease)

    async def run(owner: str) -> CleanupReport:
        return await run_cleanup(
            account,
            [],
            rows={},
            config=config,
            settings=cleanup,
            tasks=[SlowTask()],
            owner=owner,
        )

    first = asyncio.create_task(run("first"))
    await asyncio.sleep(2 * lease)  # without renewals the lease would have run out by now
    second = await run("second")
    [working] = (await first).tasks

    assert working.finished
    assert second.tasks[0].skipped == "leased by another instance"
    assert (second.tasks[0].leased_by or "").startswith("first until")


async def test_a_request_that_fails_leaves_its_record_for_the_next_pass_not_the_page(
    backend: Backend,
) -> None:
    # Orders charges a card for each order: its records have an output, so the task lists
    # each one's prefix (a record that committed none is retired without a listing).
    harness, names = await new_flow(backend, publish=False)
    for order in "abc":
        await place_order(harness, names, order)
    await harness.run_until_quiet()
    records = await harness.outbox_records(names.orders)
    container = harness.config.tokens_container
    listings = {f"{container}/{token_prefix(names.orders, r.message_id)}": r for r in records}
    failed: list[str] = []

    def first_outputs_listing(op: Operation) -> Fault | None:
        # The listing of one record's outputs: a request only that record's judgement makes.
        if failed or op.kind != "blob.list" or op.target not in listings:
            return None
        failed.append(op.target)
        return Fault.ERROR_BEFORE

    faulty = InstrumentedAccount(harness.raw)
    faulty.instrumentation.plan = first_outputs_listing

    first = await clean(harness, settings(), account=faulty)

    [orders] = [t for t in first.tasks if t.task == f"outbox.{names.orders}"]
    assert orders.finished
    assert orders.kept == {"storage_error": 1}
    assert orders.removed == {"incoming_tokens": 2, "outbox_records": 2}
    [failed_listing] = failed
    [left] = await harness.outbox_records(names.orders)
    assert left.message_id == listings[failed_listing].message_id
    assert await harness.tokens() == [left.incoming_token]  # its R7 waits with it
    second = await clean(harness, settings())
    assert second.removed()["outbox_records"] == 1
    assert second.removed()["incoming_tokens"] == 1
    assert await residue(harness) == (0, 0)


@pytest.mark.parametrize("fault", [Fault.ERROR_BEFORE, Fault.ERROR_AFTER])
async def test_a_failed_delete_of_incoming_tokens_leaves_their_records_for_the_next_pass(
    backend: Backend, fault: Fault
) -> None:
    """The R7 deletes of a page's retired records go in one batch request: when it fails
    (applied or not), every record of the batch stays, so no O(m) is retired while its
    incoming token may still be there (a copy would find it claimed by a claim id no O(m)
    holds). The next pass deletes what is left of them and retires the records."""
    harness, names = await new_flow(backend, publish=False, charge=False)
    for order in "abc":
        await place_order(harness, names, order)
    await harness.run_until_quiet()
    faulty = InstrumentedAccount(harness.raw)
    faulty.instrumentation.plan = fault_at_first("blob.delete_batch", fault)

    first = await clean(harness, settings(), account=faulty)

    assert [op.kind for op, _ in faulty.instrumentation.injected] == ["blob.delete_batch"]
    [orders] = [t for t in first.tasks if t.task == f"outbox.{names.orders}"]
    assert orders.finished
    assert (orders.removed, orders.kept) == ({}, {"storage_error": 3})
    # Applied, the deletes took the tokens; not applied, the tokens wait, still claimed.
    assert await residue(harness) == (3, 0 if fault is Fault.ERROR_AFTER else 3)
    assert await harness.tokens_in_flight() == []
    second = await clean(harness, settings())
    assert second.removed()["outbox_records"] == 3
    assert second.removed()["incoming_tokens"] == (0 if fault is Fault.ERROR_AFTER else 3)
    assert await residue(harness) == (0, 0)


async def test_a_page_whose_listing_times_out_once_is_tried_again_in_the_same_run(
    backend: Backend,
) -> None:
    harness, names = await new_flow(backend, publish=False, charge=False)
    await place_order(harness, names)
    await harness.run_until_quiet()
    faulty = InstrumentedAccount(harness.raw)
    faulty.instrumentation.plan = fault_at_first("table.query", Fault.ERROR_BEFORE)

    report = await clean(harness, settings(), account=faulty)

    assert [op.kind for op, _ in faulty.instrumentation.injected] == ["table.query"]
    assert report.complete
    assert await residue(harness) == (0, 0)


@pytest.mark.parametrize("fault", [Fault.ERROR_AFTER, Fault.ERROR_BEFORE])
async def test_a_checkpoint_write_that_times_out_does_not_lose_the_lease(
    backend: Backend, fault: Fault
) -> None:
    """On a busy store a lease write may time out and still land: the ETag we hold is then
    stale although the lease is ours. The task carries on to its end in the same run."""
    harness, names = await new_flow(backend, publish=False, charge=False)
    for order in "abc":
        await place_order(harness, names, order)
    await harness.run_until_quiet()
    cleanup = settings(page_size=1)
    task = f"outbox.{names.orders}"
    faulty = InstrumentedAccount(harness.raw)
    hit: list[int] = []

    def first_checkpoint_write(op: Operation) -> Fault | None:
        if op.kind != "table.update" or task not in op.target or hit:
            return None
        if not op.target.startswith(cleanup.checkpoint_table):
            return None
        hit.append(op.index)
        return fault

    faulty.instrumentation.plan = first_checkpoint_write
    base = harness.config.clock
    config = replace(harness.config, clock=lambda: base() + 2)

    report = await run_cleanup(
        faulty,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(faulty),
        config=config,
        settings=cleanup,
        owner="busy",
    )

    assert [op.kind for op, _ in faulty.instrumentation.injected] == ["table.update"]
    [orders] = [t for t in report.tasks if t.task == task]
    assert (orders.finished, orders.skipped) == (True, None)
    assert orders.removed == {"incoming_tokens": 3, "outbox_records": 3}
    assert report.complete
    saved = await harness.raw.table(cleanup.checkpoint_table).get(TASK_PARTITION, task)
    assert (saved["owner"], saved["continuation"]) == ("busy", "")


async def test_a_checkpoint_row_taken_by_another_owner_still_loses_the_lease(
    backend: Backend,
) -> None:
    table = backend.account.table(unique_name("cleanup"))
    await table.create_if_missing()
    checkpoints = Checkpoints(table, 30)
    now = to_datetime(time.time() if backend.clock is None else backend.clock())
    mine = await checkpoints.acquire("t", "me", now)
    assert mine is not None
    taken = await checkpoints.acquire("t", "other", now + timedelta(seconds=60))
    assert taken is not None

    with pytest.raises(LeaseLost):
        await checkpoints.advance(mine, "next", now)

    saved = await table.get(TASK_PARTITION, "t")
    assert saved["owner"] == "other"
