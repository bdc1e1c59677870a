"""The cleanup's removal of expired discard archive entries (``shared.cleanup.discarded``):
an entry goes once its ``keep_until`` has passed, never sooner; one whose ``keep_until`` is
missing or is not a time (written by hand, or tampered with) is kept and reported, never
deleted on a guess. The same rules on the in-memory account and on Azurite."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from shared.bus.config import BusConfig
from shared.bus.discard import KEEP_UNTIL, Discard, DiscardFilter, DiscardPlaces, discard_parked
from shared.bus.poison import Reason, poison_body
from shared.cleanup.discarded import ExpiredDiscards
from shared.cleanup.job import run_cleanup
from shared.cleanup.report import CleanupReport, TaskReport
from shared.cleanup.settings import CleanupSettings
from shared.cleanup.tasks import standard_tasks
from shared.clock import to_datetime
from shared.config import default_bus_config
from shared.resources import poison_queue
from tests.conftest import Backend, unique_name

RETENTION = timedelta(days=90)


def bus_config(backend: Backend) -> BusConfig:
    config = replace(default_bus_config(), discarded_container=unique_name("discarded"))
    return config if backend.clock is None else replace(config, clock=backend.clock)


async def discard_one(backend: Backend, config: BusConfig, i: int, *, days_ago: float) -> str:
    """Park message ``m-<i>`` and discard it as if ``days_ago`` days ago; its archive name."""
    endpoint = unique_name("orders")
    poison = backend.account.queue(poison_queue(endpoint))
    await poison.create_if_missing()
    signal = f'{{"message_id": "m-{i}"}}'
    await poison.send(poison_body(signal, Reason(endpoint, "boom", 5, message_id=f"m-{i}")))
    archive = backend.account.blob_container(config.discarded_container)
    await archive.create_if_missing()
    at = to_datetime(config.clock()) - timedelta(days=days_ago)
    [done] = (
        await discard_parked(
            poison,
            endpoint,
            DiscardFilter(message_id=f"m-{i}"),
            DiscardPlaces(
                archive,
                tokens=backend.account.blob_container(config.tokens_container),
                parked=backend.account.blob_container(config.parked_container),
            ),
            Discard(reason="duplicate of a refunded order", by="ops", at=at, retention=RETENTION),
        )
    ).discarded
    return done.archived_as


async def clean(backend: Backend, config: BusConfig) -> TaskReport:
    report: CleanupReport = await run_cleanup(
        backend.account,
        {},
        rows={},
        config=config,
        settings=CleanupSettings(checkpoint_table=unique_name("cleanup")),
        tasks=[ExpiredDiscards()],
    )
    [task] = report.tasks
    return task


async def names(backend: Backend, config: BusConfig) -> set[str]:
    archive = backend.account.blob_container(config.discarded_container)
    return {blob.name async for blob in archive.list()}


def test_every_pass_looks_after_the_archive() -> None:
    assert "discarded" in [task.id for task in standard_tasks(["orders"])]


async def test_an_entry_goes_once_its_retention_has_passed_and_not_before(
    backend: Backend,
) -> None:
    config = bus_config(backend)
    expired = await discard_one(backend, config, 1, days_ago=91)
    kept = await discard_one(backend, config, 2, days_ago=89)

    task = await clean(backend, config)

    assert task.removed["discarded_entries"] == 1
    assert task.kept["within_retention"] == 1
    assert await names(backend, config) == {kept}
    assert expired not in await names(backend, config)


async def test_an_entry_whose_keep_until_is_not_a_time_is_kept_and_reported(
    backend: Backend,
) -> None:
    config = bus_config(backend)
    archive = backend.account.blob_container(config.discarded_container)
    await archive.create_if_missing()
    await archive.create("orders/tampered", b"{}", {KEEP_UNTIL: "yesterday"})
    await archive.create("orders/naive", b"{}", {KEEP_UNTIL: "2001-01-01T00:00:00"})
    await archive.create("orders/bare", b"{}", {})

    task = await clean(backend, config)

    assert task.kept["bad_row"] == 3
    assert not task.removed
    assert await names(backend, config) == {"orders/tampered", "orders/naive", "orders/bare"}
    assert any("yesterday" in line for line in task.bad_rows)


async def test_no_archive_yet_is_a_pass_with_nothing_to_do(backend: Backend) -> None:
    task = await clean(backend, bus_config(backend))

    assert not task.removed
    assert not task.kept
