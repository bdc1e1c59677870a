"""Process-wide objects for the function app: built once per worker, on first use.

Kept out of ``function_app.py`` so that the bindings file stays declarations only and this
logic can be tested without the Functions host.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from shared import http_ingress
from shared.bus import Bus, BusConfig, Outcome
from shared.bus.pipeline import queue_text
from shared.cleanup.job import endpoint_modes, run_cleanup
from shared.cleanup.settings import CleanupSettings
from shared.health import check_storage
from shared.host.chaos import with_crashes, with_duplicates
from shared.host.queue_worker import QueueSettings
from shared.resources import load_resources
from shared.sample.app import app as sample_app
from shared.settings import DEFAULT_SETTING, load_storage_settings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount

STORAGE_SETTING_NAME = "BUS_STORAGE_SETTING"
"""App setting naming the connection setting to use (default ``AzureWebJobsStorage``)."""
OUTCOME_LOG_SETTING = "BUS_OUTCOME_LOG"
"""Optional file to which every receive appends ``{"endpoint", "outcome"}`` (one JSON line);
the demo reads it to count suppressed duplicates across host restarts."""

HOST_JSON = Path(__file__).resolve().parents[1] / "host.json"

_account: StorageAccount | None = None
_bus: Bus | None = None
_ingress_bus: Bus | None = None


def storage_account(environ: Mapping[str, str] = os.environ) -> StorageAccount:
    """The worker's storage account, created from the app settings on first use (with the
    demo's duplicated signals when that fault setting is on, see ``shared.host.chaos``)."""
    global _account
    if _account is None:
        setting = environ.get(STORAGE_SETTING_NAME, DEFAULT_SETTING)
        account = AzureStorageAccount(load_storage_settings(environ, setting))
        _account = with_duplicates(account, environ)
    return _account


def bus_config() -> BusConfig:
    """Defaults, with names from infra/resources.json."""
    resources = load_resources()
    return BusConfig(
        tokens_container=resources.containers["tokens"],
        topics_container=resources.containers["topics"],
        ingress_table=resources.tables["ingress"],
        parked_container=resources.containers["parked"],
        max_dequeue_count=QueueSettings.from_host_json(HOST_JSON).max_dequeue_count,
    )


def build_bus(account: StorageAccount) -> Bus:
    """A bus for the sample app on ``account`` (the CLI and the demo bring their own)."""
    return Bus(sample_app, account, bus_config())


def bus() -> Bus:
    """The worker's bus for the sample app (queue-triggered processing)."""
    global _bus
    if _bus is None:
        _bus = build_bus(with_crashes(storage_account(), os.environ))
    return _bus


def ingress_bus() -> Bus:
    """The worker's bus for HTTP ingress. Simulated crashes, when set, hit it too: a crash
    between a token's create and its ingress record leaves a token no record lists, which the
    cleanup's abandoned-token task removes; the client's retry with the same key is answered
    exactly once either way."""
    global _ingress_bus
    if _ingress_bus is None:
        _ingress_bus = build_bus(with_crashes(storage_account(), os.environ))
    return _ingress_bus


async def close() -> None:
    """Release the worker's connections (the local host calls this when it stops)."""
    global _account, _bus, _ingress_bus
    account, _account, _bus, _ingress_bus = _account, None, None, None
    if account is not None:
        await account.close()


async def receive(endpoint: str, body: bytes, dequeue_count: int) -> Outcome:
    """What every queue-triggered function does with its message. The host has already
    base64-decoded the body; a body that is not UTF-8 is parked whole (``queue_text``)."""
    outcome = await bus().receive(endpoint, queue_text(body), dequeue_count)
    log_path = os.environ.get(OUTCOME_LOG_SETTING)
    if log_path:
        _append_line(log_path, json.dumps({"endpoint": endpoint, "outcome": outcome.value}))
    return outcome


def _append_line(path: str, line: str) -> None:
    # One O_APPEND write per line: lines stay whole even when the process is killed, and a
    # few hundred bytes never block long enough to matter to the event loop.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def ingress(headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
    """HTTP status and JSON body for ``POST /api/messages`` (see ``shared.http_ingress``)."""
    answer = await http_ingress.handle(ingress_bus(), headers, body)
    return answer.status, answer.json()


async def cleanup_now(
    account: StorageAccount | None = None,
    *,
    grace_seconds: float | None = None,
    environ: Mapping[str, str] = os.environ,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """One cleanup run over every endpoint (the timer function and ``bus cleanup``): paged,
    resumable, within the ``CLEANUP_*`` app settings' time budget (``shared.cleanup``).

    Returns the JSON-ready report: totals removed and kept, and one entry per task."""
    settings = CleanupSettings.from_env(environ)
    if grace_seconds is not None:
        settings = replace(settings, grace_seconds=grace_seconds)
    report = await run_cleanup(
        account or storage_account(),
        endpoint_modes(sample_app),
        config=bus_config(),
        settings=replace(settings, checkpoint_table=load_resources().tables["cleanup"]),
        progress=progress,
    )
    return report.to_dict()


async def health(account: StorageAccount | None = None) -> tuple[int, str]:
    """HTTP status and JSON body for the health endpoint: 200 when every resource answers."""
    report = await check_storage(account or storage_account(), load_resources())
    return (200 if report.healthy else 503), json.dumps(report.as_dict())
