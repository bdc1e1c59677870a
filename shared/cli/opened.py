"""An app's worker on its opened accounts, each read once before a command runs, so that an
operator hears at once which account is wrong: for ``bus`` on one app and for each app of
``bus status --system``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from shared.account_in_use import announce_account
from shared.bus import BusApp
from shared.config import AppConfig
from shared.resources import STATE
from shared.runtime import Worker
from shared.storage_check import check_storage_ready
from shared.stores.azure import AzureStorageAccount


@asynccontextmanager
async def opened_worker(
    app: BusApp, config: AppConfig, *, require_resources: bool, tool: str = "bus"
) -> AsyncIterator[Worker]:
    """``app`` on the messaging account of ``config`` (and its state account, when separate),
    each named on stderr as ``tool`` uses it; closed on exit."""
    storage = config.require_storage()
    announce_account(storage, tool)
    async with AzureStorageAccount(storage) as account:
        worker = Worker(app, config, account)
        # One bounded read first: the SDK retries an unreachable endpoint for over a minute,
        # and an operator should hear at once what is wrong.
        await check_storage_ready(
            account,
            app.endpoints,
            describe=storage.describe(),
            require_resources=require_resources,
        )
        try:
            if worker.separate_state:
                await _check_state_ready(worker, require_resources, tool)
            yield worker
        finally:
            await worker.close()  # its database pool, if it opened one (the account is ours)


async def _check_state_ready(worker: Worker, require_resources: bool, tool: str) -> None:
    """Name the app's state account and read it once, as the messaging account is read."""
    state = worker.app_config.require_state_storage()
    announce_account(state, f"{tool} (state)")
    await check_storage_ready(
        worker.state_account(),
        (),
        tables=worker.resources.by_role()[STATE].tables,
        describe=f"the state account ({state.describe()})",
        require_resources=require_resources,
    )
