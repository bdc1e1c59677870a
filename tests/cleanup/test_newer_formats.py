"""The cleanup never deletes what it cannot read: a token, O(m) or ingress record written in
a newer format than this version reads is kept, counted as ``newer_version`` and logged,
while the same record in a format it reads is removed as usual."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest

from shared.bus.envelope import token_name
from shared.bus.ids import fresh_id
from shared.bus.ingress import INGRESS_ROW
from shared.bus.origin import Origin
from shared.bus.records import OutboxRecord, outbox_row
from shared.clock import to_datetime
from shared.stores.table import Entity
from tests.bus.harness import Harness
from tests.cleanup.test_cleanup_job import clean, new_flow, settings
from tests.conftest import Backend


def long_ago(harness: Harness) -> datetime:
    """A day before the harness's clock: old enough for any grace."""
    return to_datetime(harness.config.clock()) - timedelta(days=1)


async def test_a_token_of_a_newer_format_is_kept_beside_one_removed(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    # Given two abandoned tokens (their origin row never committed them), one of format 3
    harness, names = await new_flow(backend, publish=False, charge=False)
    tokens = harness.raw.blob_container(harness.config.tokens_container)
    origin = Origin(names.orders, "p1", outbox_row(fresh_id())).encode()
    created = {}
    for version in ("2", "3"):
        name = token_name(names.orders, fresh_id(), fresh_id(), fresh_id(), b"{}")
        await tokens.create(name, b"{}", {"claim": "", "origin": origin, "format": version})
        created[version] = name

    # When the cleanup runs
    with caplog.at_level(logging.WARNING, logger="shared.cleanup.tasks"):
        report = await clean(harness, settings())

    # Then the one it reads is removed, the newer one kept, counted and logged
    assert report.removed() == {"abandoned_tokens": 1}
    assert report.kept()["newer_version"] == 1
    assert await harness.tokens() == [created["3"]]
    [line] = [r.getMessage() for r in caplog.records if "newer version" in r.getMessage()]
    assert created["3"] in line


async def test_an_outbox_record_of_a_newer_format_is_kept(backend: Backend) -> None:
    # Given two old claims nobody committed, whose incoming tokens are gone: one of format 3
    harness, names = await new_flow(backend, publish=False, charge=False)
    rows = harness.rows(names.orders).rows()
    for version in (2, 3):
        record = OutboxRecord(
            f"p{version}",
            fresh_id(),
            claim=fresh_id(),
            incoming_token="-",
            started_at=long_ago(harness),
            format=version,
        )
        await rows.insert(record.to_entity())

    # When the cleanup runs
    report = await clean(harness, settings())

    # Then only the newer one is left
    assert report.removed() == {"unused_outbox_records": 1}
    assert report.kept()["newer_version"] == 1
    assert [r.partition_key async for r in rows.every(row_key_prefix="outbox|")] == ["p3"]


async def test_an_ingress_record_of_a_newer_format_is_kept(backend: Backend) -> None:
    # Given two ingress records past their window, with nothing waiting: one of format 3
    harness, _ = await new_flow(backend, publish=False, charge=False)
    table = harness.raw.table(harness.config.ingress_table)
    for version in (2, 3):
        await table.insert(
            Entity(
                f"key-{version}",
                INGRESS_ROW,
                {
                    "format": version,
                    "sender": "cli",
                    "incoming_id": fresh_id(),
                    "expires_at": long_ago(harness),
                    "outgoing": '{"v":2,"outputs":[]}',
                    "abandoned": "[]",
                },
            )
        )

    # When the cleanup runs
    report = await clean(harness, settings())

    # Then only the newer one is left
    assert report.removed() == {"ingress_records": 1}
    assert report.kept()["newer_version"] == 1
    assert [e.partition_key async for e in table.query_all()] == ["key-3"]


async def test_a_shared_payload_whose_origin_is_of_a_newer_format_is_kept(
    backend: Backend,
) -> None:
    # Given two old shared payloads whose tokens are gone, each named by an uncommitted O(m):
    # one of format 3
    harness, names = await new_flow(backend, publish=False, charge=False)
    rows = harness.rows(names.orders).rows()
    payloads = harness.raw.blob_container(harness.config.payloads_container)
    kept = {}
    for version in (2, 3):
        record = OutboxRecord(
            f"p{version}",
            fresh_id(),
            claim=fresh_id(),
            incoming_token="-",
            started_at=long_ago(harness),
            format=version,
        )
        await rows.insert(record.to_entity())
        origin = Origin(names.orders, record.partition_key, outbox_row(record.message_id))
        name = f"{names.orders}/{record.message_id}/{'p' * 43}"
        await payloads.upload(name, b'{"body": 1}', {"origin": origin.encode()})
        kept[version] = name

    # When the cleanup runs twice (its tasks run side by side: the payloads task may find
    # the older O(m) being removed by the outbox task and keep its payload for the next pass)
    first = await clean(harness, settings())
    second = await clean(harness, settings())

    # Then the payload whose origin it cannot read stays
    for report in (first, second):
        assert report.kept()["newer_version"] == 2  # the O(m) itself, and the payload
    assert [b.name async for b in payloads.list()] == [kept[3]]
