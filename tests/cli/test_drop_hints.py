"""The fixes the bus suggests when a handler publishes an event no endpoint is subscribed to
are commands the CLI accepts there, and they fix it: run on Azurite, taken from the warning
the bus logs, through ``main(argv)`` as the console script calls it."""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.app_loader import APP_SETTING
from shared.bus import BusApp
from shared.bus.topics import RecipientLists
from shared.bus.unsubscribed import unsubscribed_counts
from shared.cli import main
from shared.clock import system_clock
from shared.resources import RESOURCES_FILE
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.bus.harness import Harness
from tests.cli.drop_apps import Ring, after, before
from tests.conftest import Backend, started_azurite

pytestmark = pytest.mark.azurite

APPS = {"before": "tests.cli.drop_apps:before", "after": "tests.cli.drop_apps:after"}
Run = Callable[..., Awaitable[tuple[int, str, str]]]


@pytest.fixture
def emulator() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # private: the CLI uses the fixed names of the shared resources


@pytest.fixture
async def account(emulator: AzuriteEndpoints) -> AsyncIterator[AzureStorageAccount]:
    async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as storage:
        yield storage


@pytest.fixture
def bus(
    emulator: AzuriteEndpoints,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Run:
    """``bus <args>`` on one version of the app: ``await bus("after", "subscribe", "--all")``
    (in a thread: the command runs its own event loop)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    monkeypatch.delenv("BUS_STORAGE_SETTING", raising=False)

    async def run(version: str, *args: str) -> tuple[int, str, str]:
        monkeypatch.setenv(APP_SETTING, APPS[version])
        code = await asyncio.to_thread(main, ["--no-progress", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


async def harness_of(account: AzureStorageAccount, app: BusApp) -> Harness:
    """The app on the resources the CLI uses (it subscribes every endpoint, as a deployment
    that ran `bus subscribe --all`)."""
    return await Harness.create(
        Backend("azurite", account),
        app,
        tokens_container="tokens",
        topics_container="topics",
        ingress_table="ingress",
    )


async def ring_and_hear(harness: Harness, key: str, caplog: pytest.LogCaptureFixture) -> str:
    """Send Ring to the desk, process everything, return the warning about Rang's topic."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shared.bus.unsubscribed"):
        await harness.setup_bus.client().send(Ring(key=key), to="desk", idempotency_key=key)
        await harness.run_until_quiet()
    [warning] = [r.getMessage() for r in caplog.records if "has no subscriber" in r.getMessage()]
    return warning


def write_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def suggested(text: str) -> list[list[str]]:
    """The arguments of every `bus ...` command the text suggests."""
    return [shlex.split(command)[1:] for command in re.findall(r"`(bus [^`]+)`", text)]


async def test_an_endpoint_that_takes_the_event_is_subscribed_by_the_command_suggested(
    bus: Run, account: AzureStorageAccount, caplog: pytest.LogCaptureFixture
) -> None:
    harness = await harness_of(account, after)
    assert (await bus("after", "unsubscribe", "rang", "bell"))[0] == 0  # as by mistake

    warning = await ring_and_hear(harness, "r1", caplog)

    assert "desk published Rang but topic rang has no subscriber" in warning
    assert "bell takes these events but is not subscribed" in warning
    assert suggested(warning) == [["status"], ["subscribe", "rang", "bell"]]
    code, out, err = await bus("after", "status")
    assert code == 0, err
    assert "events dropped, topic rang has no subscriber: 1" in out
    code, out, err = await bus("after", "subscribe", "rang", "bell")
    assert (code, out.strip()) == (0, "bell subscribed to rang"), err
    await harness.setup_bus.client().send(Ring(key="r2"), to="desk", idempotency_key="r2")
    await harness.run_until_quiet()
    assert len(await harness.audit_ids("bell")) == 1  # the next Rang reached the bell
    assert await unsubscribed_counts(account.blob_container("topics")) == {"rang": 1}


async def test_an_event_no_endpoint_takes_is_fixed_by_a_handler_and_subscribe_all(
    bus: Run, account: AzureStorageAccount, caplog: pytest.LogCaptureFixture
) -> None:
    harness = await harness_of(account, before)

    warning = await ring_and_hear(harness, "r1", caplog)

    assert "no endpoint of this app takes the events of topic rang" in warning
    assert "add a handler for them to an endpoint" in warning
    commands = suggested(warning)
    assert ["subscribe", "--all"] in commands
    # What the warning used to suggest, and the CLI refuses: the desk takes no Rang.
    assert ["subscribe", "rang", "desk"] not in commands
    code, _, err = await bus("before", "subscribe", "rang", "desk")
    assert code != 0
    assert "desk takes no event of topic rang" in err
    # Every command naming no placeholder runs; on the app with the handler added, deployed
    # as its resources file says, they fix it.
    runnable = [args for args in commands if not any(a.isupper() for a in args)]
    assert runnable == [["status"], ["provision"], ["subscribe", "--all"]]
    assert (await bus("before", "status"))[0] == 0
    code, out, _ = await bus("after", "resources")  # `bus resources > infra/resources.json`
    assert code == 0
    await asyncio.to_thread(write_file, RESOURCES_FILE, out)
    for args in runnable[1:]:
        code, out, err = await bus("after", *args)
        assert code == 0, err
    assert "bell subscribed to rang" in out.splitlines()
    topics = RecipientLists(account.blob_container("topics"), system_clock, 0.0)
    assert await topics.subscribers("rang") == ("bell",)
