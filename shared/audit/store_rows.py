"""The audit rows of endpoints that keep them off tables: in PostgreSQL (``store="postgres"``),
in Cosmos DB (``"cosmos"``) or as blob documents (``"blob"``).

Spark tasks read tables with the storage SDK; these rows are in no table, so the export and
the system audit's driver read them page by page through the bus's own stores. The stores are
opened by a ``Worker`` of the app, the one place that knows where each store is and how to
sign in to it, so an audit reads an endpoint's rows exactly where the app writes them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from shared.bus import BusApp
from shared.bus.app import Store
from shared.bus.state.base import EndpointState
from shared.stores.account import StorageAccount

if TYPE_CHECKING:
    from shared.config import AppConfig
    from shared.settings import Settings

STORE_NAMES: dict[Store, str] = {
    "table": "Table Storage",
    "postgres": "PostgreSQL",
    "cosmos": "Cosmos DB",
    "blob": "blob documents",
}
"""Each store as the audit's messages name it."""


def off_tables(app: BusApp, endpoints: Iterable[str]) -> dict[str, Store]:
    """Those of ``endpoints`` that ``app`` declares with a store other than tables, and
    their store; endpoints the app does not declare are read as tables."""
    declared = app.endpoints
    return {
        name: declared[name].store
        for name in endpoints
        if name in declared and declared[name].store != "table"
    }


def described(stores: dict[str, Store]) -> str:
    """``stores`` for a message: the endpoints of each store, store by store."""
    by_store: dict[Store, list[str]] = {}
    for name, store in stores.items():
        by_store.setdefault(store, []).append(name)
    return "; ".join(f"{sorted(names)} in {STORE_NAMES[s]}" for s, names in by_store.items())


@contextlib.asynccontextmanager
async def endpoint_states(
    app: BusApp,
    config: AppConfig | Settings,
    endpoints: Iterable[str],
    account: StorageAccount | None = None,
) -> AsyncIterator[dict[str, EndpointState]]:
    """The rows of each of ``endpoints`` that keeps them off tables, opened as the app opens
    them (on ``account`` when given, the caller's to close), closed on leaving."""
    names = list(off_tables(app, endpoints))
    if not names:
        yield {}
        return
    from shared.runtime import Worker  # the worker loads the app's whole runtime

    worker = Worker(app, config, account, state_account=account)
    try:
        yield {name: worker.bus().endpoint_state(name) for name in names}
    finally:
        await worker.close()
