"""The bench's PostgreSQL token mode, in a host process on Azurite and a real server."""

from __future__ import annotations

import pytest

from lab.bench.modes import TOKEN_POSTGRES, postgres_modes
from lab.bench.runner import Plan, measure
from lab.local.azurite import AzuriteEndpoints
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount

pytestmark = [pytest.mark.azurite, pytest.mark.postgres]


async def test_token_mode_over_postgres_drains_exactly_once_and_counts_sql_operations(
    azurite: AzuriteEndpoints, postgres: str
) -> None:
    [mode] = postgres_modes()
    connection = azurite.connection_string
    async with AzureStorageAccount(StorageSettings(connection)) as raw:
        result = await measure(
            raw,
            mode,
            Plan(4, concurrency=4),
            separate_processes=True,
            connection_string=connection,
            postgres_url=postgres,
        )

    assert result.mode == TOKEN_POSTGRES
    assert result.ok, result.error
    assert result.handled == 8
    assert result.outcomes == {"processed": 8}
    ops = result.operations
    assert ops["sql.query"] == ops["sql.insert"] == ops["sql.transact"] == 8
    assert "table.transact" not in ops  # no endpoint row is in Table Storage
    assert result.residue_kinds["state"] == 8
    assert result.residue_kinds["outbox"] == result.residue_kinds["audit"] == 8  # before cleanup
    assert result.operation_ms["sql.transact"] > 0


def test_it_is_refused_where_the_bus_has_no_token_mode() -> None:
    [mode] = postgres_modes(offered=("processed_messages",))
    assert not mode.available
