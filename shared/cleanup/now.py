"""One cleanup pass for an app, configured from the app settings (``AppConfig.cleanup``):
what the ``cleanup`` timer function and ``bus cleanup`` run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from shared.bus.app import BusApp
from shared.bus.config import BusConfig
from shared.bus.state.rows import EndpointRows
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.settings import CleanupSettings
from shared.stores.account import StorageAccount


async def cleanup_pass(
    account: StorageAccount,
    app: BusApp,
    config: BusConfig,
    settings: CleanupSettings,
    *,
    rows: Mapping[str, EndpointRows],
    grace_seconds: float | None = None,
    progress: Callable[[str], None] | None = None,
    wait: bool = False,
) -> dict[str, Any]:
    """One run over every endpoint of ``app``: paged, resumable, within the ``CLEANUP_*``
    settings' time budget (``shared.cleanup``), over each endpoint's ``rows`` as the caller
    chose them (``Worker.endpoint_rows``). Returns the JSON-ready report: totals removed
    and kept, and one entry per task."""
    cleanup = settings
    if grace_seconds is not None:
        cleanup = replace(cleanup, grace_seconds=grace_seconds)
    report = await run_cleanup(
        account,
        endpoint_modes(app),
        rows=rows,
        config=config,
        settings=cleanup,
        progress=progress,
        wait=wait,
    )
    return report.to_dict()
