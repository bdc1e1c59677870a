"""What a measurement leaves in storage once its queues are empty, before any cleanup.

Everything beyond the business state counts: tokens, outbox records, audit rows, processed-
message rows, state versions, index rows. Rows are grouped by the part of their RowKey before
the first ``|`` (the bus's row naming), so a new mode's rows show up under their own name.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from lab.bench.stores import BenchRows
from lab.bench.workload import Names
from shared.bus.records import STATE_ROW
from shared.bus.state.rows import EndpointRows
from shared.errors import NotFound
from shared.resources import poison_queue
from shared.stores.account import StorageAccount


@dataclass
class Residue:
    kinds: Counter[str] = field(default_factory=Counter)
    """Rows per RowKey kind (``state`` included) and ``token blobs``."""
    ingress_rows: int = 0
    """Idempotency records of the client that enqueued the roots (reported apart: they
    belong to how messages enter, which the floor has no equivalent of)."""
    poisoned: int = 0
    left_in_queues: int = 0

    @property
    def total(self) -> int:
        """Residue proper: everything except the business state rows."""
        return sum(n for kind, n in self.kinds.items() if kind != STATE_ROW)


async def _rows(account: StorageAccount, table: str) -> list[str]:
    try:
        return [e.row_key async for e in account.table(table).query_all()]
    except NotFound:
        return []


async def _stored_rows(rows: EndpointRows) -> list[str]:
    """The row keys of an endpoint's rows in another store (every mode's, as in its table)."""
    return [e.row_key async for e in rows.every()]


async def measure_residue(
    account: StorageAccount, names: Names, stores: BenchRows | None = None
) -> Residue:
    """``stores``: where the endpoints keep their rows (None: their tables)."""
    residue = Residue()
    for endpoint in names.endpoints:
        rows = (
            await _rows(account, endpoint)
            if stores is None or stores.in_tables
            else await _stored_rows(stores.rows(endpoint, account))
        )
        for row_key in rows:
            residue.kinds[row_key.split("|", 1)[0]] += 1
        residue.poisoned += await account.queue(poison_queue(endpoint)).approximate_count()
        residue.left_in_queues += await account.queue(endpoint).approximate_count()
    try:
        tokens = [b async for b in account.blob_container(names.tokens).list()]
    except NotFound:
        tokens = []
    if tokens:
        residue.kinds["token blobs"] = len(tokens)
    residue.ingress_rows = len(await _rows(account, names.ingress))
    return residue
