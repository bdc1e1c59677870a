"""Where an endpoint keeps its state, outbox records O(m) and audit rows.

Token mode's pipeline reads and commits these rows through ``EndpointState`` only, and the
window modes theirs through ``EndpointState.rows()`` (``ModeRows``, ``rows``), so each
pipeline serves every store: Table Storage (``table``), PostgreSQL (``postgres``,
``postgres_rows``) and the in-memory model of PostgreSQL (``memory_sql``) the simulator and
fast tests use. Tokens, signals and recipient lists stay in Blob and Queue storage whatever
the store.
"""

from shared.bus.state.base import EndpointState, Snapshot, StateRow, StateTransaction, StateWrite

__all__ = ["EndpointState", "Snapshot", "StateRow", "StateTransaction", "StateWrite"]
