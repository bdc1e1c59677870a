"""The one place the simulator calls the cleanup, so a fuller cleanup job can replace the
outbox sweep here without touching the rest of the simulator."""

from __future__ import annotations

from collections.abc import Iterable

from shared.bus.records import AUDIT_PREFIX
from shared.cleanup.sweep import sweep_endpoint
from shared.clock import Clock
from shared.stores.account import StorageAccount


async def cleanup_pass(
    account: StorageAccount,
    endpoints: Iterable[str],
    *,
    tokens_container: str,
    ingress_table: str,
    grace_seconds: float,
    clock: Clock,
) -> None:
    """One cleanup pass over every endpoint."""
    for endpoint in endpoints:
        await sweep_endpoint(
            account,
            endpoint,
            tokens_container=tokens_container,
            ingress_table=ingress_table,
            grace_seconds=grace_seconds,
            clock=clock,
        )


async def expire_audit_rows(account: StorageAccount, endpoints: Iterable[str]) -> int:
    """Delete every audit row, as the audit retention eventually does. Used only when a
    simulated process stalls for longer than any retention period; returns how many went."""
    removed = 0
    for endpoint in endpoints:
        table = account.table(endpoint)
        async for entity in table.query_all(row_key_prefix=AUDIT_PREFIX):
            await table.delete(entity.partition_key, entity.row_key)
            removed += 1
    return removed
