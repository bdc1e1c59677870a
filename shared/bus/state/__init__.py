"""Where an endpoint keeps its rows: every mode's, in one store per endpoint.

``EndpointRows`` (``rows``) is the one interface: a partition's rows read by key, version-guarded
writes, keyset pages and one transaction that commits rows with the audit row. Token mode reads
and commits its state row, O(m) and audit rows through ``EndpointState`` (``base``), a typed
layer over it; the window modes speak entities directly. The stores: Table Storage
(``TableRows``), PostgreSQL (``postgres_rows``, one table ``bus.mode_rows``), the in-memory model
of PostgreSQL (``memory_sql``) the simulator and fast tests use, and the counting wrapper
(``instrumented``). Tokens, signals and recipient lists stay in Blob and Queue storage whatever
the store.
"""

from shared.bus.state.base import EndpointState, Snapshot, StateRow, StateTransaction, StateWrite
from shared.bus.state.rows import EndpointRows

__all__ = [
    "EndpointRows",
    "EndpointState",
    "Snapshot",
    "StateRow",
    "StateTransaction",
    "StateWrite",
]
