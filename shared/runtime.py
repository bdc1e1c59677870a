"""Process-wide objects for the function app: built once per worker, on first use.

Kept out of ``function_app.py`` so that the bindings file stays declarations only and this
logic can be tested without the Functions host.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from shared.bus import Bus, BusConfig, Outcome
from shared.health import check_storage
from shared.resources import load_resources
from shared.sample.app import app as sample_app
from shared.settings import DEFAULT_SETTING, load_storage_settings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount

STORAGE_SETTING_NAME = "BUS_STORAGE_SETTING"
"""App setting naming the connection setting to use (default ``AzureWebJobsStorage``)."""

_account: StorageAccount | None = None
_bus: Bus | None = None


def storage_account(environ: Mapping[str, str] = os.environ) -> StorageAccount:
    """The worker's storage account, created from the app settings on first use."""
    global _account
    if _account is None:
        setting = environ.get(STORAGE_SETTING_NAME, DEFAULT_SETTING)
        _account = AzureStorageAccount(load_storage_settings(environ, setting))
    return _account


def bus() -> Bus:
    """The worker's bus for the sample app, with names from infra/resources.json."""
    global _bus
    if _bus is None:
        resources = load_resources()
        config = BusConfig(
            tokens_container=resources.containers["tokens"],
            topics_container=resources.containers["topics"],
            ingress_table=resources.tables["ingress"],
        )
        _bus = Bus(sample_app, storage_account(), config)
    return _bus


async def receive(endpoint: str, body: bytes, dequeue_count: int) -> Outcome:
    """What every queue-triggered function does with its message. The host has already
    base64-decoded the body; a body that is not UTF-8 is refused as a malformed signal."""
    return await bus().receive(endpoint, body.decode("utf-8", errors="replace"), dequeue_count)


async def health(account: StorageAccount | None = None) -> tuple[int, str]:
    """HTTP status and JSON body for the health endpoint: 200 when every resource answers."""
    report = await check_storage(account or storage_account(), load_resources())
    return (200 if report.healthy else 503), json.dumps(report.as_dict())
