"""O(m) as the PostgreSQL store keeps it (``bus.mode_rows``, its properties as text), in the
first format and in format 2 as the fixtures hold them, read back through the store; one of a
newer format is refused by the receive path's read and kept by the cleanup."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from shared.bus.records import OutboxRecord, outbox_row
from shared.bus.state.properties import decode_properties, encode_properties
from shared.bus.state.schema import SCHEMA
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.settings import CleanupSettings
from shared.errors import NewerVersion
from tests.bus.flow import FlowNames, build_flow
from tests.bus.harness import (
    Harness,
    per_mode_backend,  # noqa: F401  (fixture "backend")
)
from tests.cleanup.test_postgres_damaged_rows import database
from tests.conftest import Backend, unique_name
from tests.formats import stored_v1, wire_v2
from tests.formats.test_stored_v1 import entity
from tests.formats.wire_v1 import INCOMING

on_postgres = [pytest.mark.azurite, pytest.mark.postgres]
FIRST: dict[str, Any] = json.loads(stored_v1.FIXTURE.read_text())
SECOND: dict[str, Any] = json.loads(wire_v2.FIXTURE.read_text())


def newer_properties() -> str:
    """Format 2's committed O(m) with a format this version does not read."""
    properties = decode_properties(SECOND["outbox"]["postgres"]["committed"])
    return encode_properties({**properties, "format": 3})


@pytest.mark.parametrize(
    "backend",
    [pytest.param(("postgres", "token"), id="postgres-token", marks=on_postgres)],
    indirect=True,
)
async def test_outbox_rows_of_both_formats_are_read_from_postgresql_and_a_newer_one_kept(
    backend: Backend,
) -> None:
    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, mode="token"))
    stored = {
        "v1-claimed": FIRST["outbox"]["postgres"]["claimed"],
        "v1-committed": FIRST["outbox"]["postgres"]["committed"],
        "v2-claimed": SECOND["outbox"]["postgres"]["claimed"],
        "v2-committed": SECOND["outbox"]["postgres"]["committed"],
        "v3": newer_properties(),
    }
    async with database(backend, names.orders) as sql:
        for partition, properties in stored.items():
            await sql.execute(
                f"INSERT INTO {SCHEMA}.mode_rows (endpoint, partition_key, row_key, "
                f"properties, version) VALUES ($1, $2, $3, $4, nextval('{SCHEMA}.row_version'))",
                names.orders,
                partition,
                outbox_row(INCOMING),
                properties,
            )
    state = harness.rows(names.orders)

    for partition in ("v1-claimed", "v1-committed", "v2-claimed", "v2-committed"):
        version, status = partition.split("-")
        fixture = FIRST if version == "v1" else SECOND
        in_table = OutboxRecord.from_entity(entity(fixture["outbox"]["table"][status]))

        record = (await state.read(partition, INCOMING)).outbox

        assert record is not None
        assert record.format == int(version[1])
        assert replace(record, partition_key=in_table.partition_key, etag="") == in_table
    with pytest.raises(NewerVersion, match="format version 3"):
        await state.read("v3", INCOMING)

    report = await run_cleanup(
        harness.raw,
        endpoint_modes(harness.app),
        rows=harness.cleanup_rows(),
        config=harness.config,
        settings=CleanupSettings(grace_seconds=0, checkpoint_table=unique_name("cleanup")),
    )

    assert report.kept()["newer_version"] == 1
    async with database(backend, names.orders) as sql:
        left = await sql.fetch(
            f"SELECT partition_key FROM {SCHEMA}.mode_rows WHERE endpoint = $1 AND row_key = $2",
            names.orders,
            outbox_row(INCOMING),
        )
    assert "v3" in {r["partition_key"] for r in left}
