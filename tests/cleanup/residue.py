"""Names and readings for tests that seed a residue with ``lab.cleanup.bench.seed`` and
clean it from several processes."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from shared.bus.config import BusConfig
from shared.bus.ingress import INGRESS_ROW
from shared.bus.records import AUDIT_PREFIX, OUTBOX_PREFIX
from shared.bus.state.rows import EndpointRows, TableRows
from shared.cleanup.checkpoint import TASK_PARTITION
from shared.cleanup.settings import CleanupSettings
from shared.stores.account import StorageAccount
from shared.stores.table import Entity


@dataclass(frozen=True)
class Residue:
    suffix: str

    @property
    def endpoint(self) -> str:
        return f"crash{self.suffix}"

    @property
    def endpoints(self) -> dict[str, str]:
        return {self.endpoint: "token"}

    @property
    def config(self) -> BusConfig:
        return BusConfig(
            tokens_container=f"crashtokens{self.suffix}",
            ingress_table=f"crashingress{self.suffix}",
            clock=lambda: time.time() + 5,  # past a zero grace for tokens created just now
        )

    def rows(self, account: StorageAccount) -> dict[str, EndpointRows]:
        """The endpoint's rows, as the cleanup is given them: its table on ``account``."""
        return {self.endpoint: TableRows(account.table(self.endpoint))}

    def settings(self, **overrides: Any) -> CleanupSettings:
        return CleanupSettings(
            grace_seconds=0, checkpoint_table=f"crashcleanup{self.suffix}", **overrides
        )

    async def left(self, account: StorageAccount) -> dict[str, int]:
        """What is left of each kind of residue."""
        tokens = account.blob_container(self.config.tokens_container)
        table = account.table(self.endpoint)
        ingress = account.table(self.config.ingress_table)
        return {
            "tokens": len([b async for b in tokens.list()]),
            "outbox": len([e async for e in table.query_all(row_key_prefix=OUTBOX_PREFIX)]),
            "audit": len([e async for e in table.query_all(row_key_prefix=AUDIT_PREFIX)]),
            "ingress": len([e async for e in ingress.query_all(row_keys=[INGRESS_ROW])]),
        }

    async def checkpoints(self, account: StorageAccount) -> list[Entity]:
        table = account.table(self.settings().checkpoint_table)
        return [e async for e in table.query_all(partition_key=TASK_PARTITION)]
