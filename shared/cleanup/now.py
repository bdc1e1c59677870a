"""One cleanup pass for an app, configured from the app settings (``AppConfig.cleanup``):
what the ``cleanup`` timer function and ``bus cleanup`` run. At its end the pass measures what
is left waiting (``shared.cleanup.backlog``) and records it for the alerts (docs/alerts.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from shared.bus.app import BusApp
from shared.bus.config import BusConfig
from shared.bus.state.rows import EndpointRows
from shared.cleanup.backlog import Backlog, measure_backlog, record
from shared.cleanup.batching import STORAGE_ERRORS
from shared.cleanup.job import endpoint_modes, run_cleanup, saga_endpoints, session_endpoints
from shared.cleanup.settings import CleanupSettings
from shared.clock import to_datetime
from shared.stores.account import StorageAccount

log = logging.getLogger(__name__)


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
    chose them (``Worker.endpoint_rows``), then the backlog it leaves, recorded on
    ``config``'s telemetry with one more pass counted. Returns the JSON-ready report: totals
    removed and kept, one entry per task, and the ``backlog`` (None if it could not be
    measured)."""
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
        sessions=session_endpoints(app),
        sagas=saga_endpoints(app),
    )
    backlog = await _measured(account, app, config, cleanup)
    if backlog is not None:
        record(config.telemetry, backlog)
        # Counted after the gauges are set, so that a pass's count and its figures leave in
        # one export, which the alerts' queries rely on (docs/alerts.md). A pass that could
        # not measure is not counted: its figures would be the previous pass's.
        config.telemetry.cleanup_passes.add(1)
    return report.to_dict() | {"backlog": None if backlog is None else backlog.to_dict()}


async def _measured(
    account: StorageAccount, app: BusApp, config: BusConfig, settings: CleanupSettings
) -> Backlog | None:
    """The backlog, or None when storage fails to say (the pass has done its work all the
    same)."""
    try:
        return await measure_backlog(
            account,
            list(app.endpoints),
            config.tokens_container,
            to_datetime(config.clock()),
            settings.backlog_max_tokens,
        )
    except STORAGE_ERRORS as e:
        log.warning("cleanup: the backlog was not measured: %s", e)
        return None
