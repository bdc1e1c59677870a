"""``BUS_STATE_STORAGE_SETTING``: the connection of the app's state account, in every form the
messaging connection takes, refused by name at start-up when it is missing or ambiguous, and
unset, the messaging account itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from shared.audit.cli import EXIT_ERROR
from shared.audit.cli import main as audit_main
from shared.bus import BusApp
from shared.bus.effects import PERFORMER_ENDPOINT
from shared.config import AppConfig, build_config
from shared.effects.markers import performer_markers
from shared.errors import ConfigurationError, NotFound
from shared.health import check_storage
from shared.provisioning import provision
from shared.resources import resources_for
from shared.runtime import Worker
from shared.settings import DEV_CONNECTION_STRING, resolve_settings
from shared.stores.memory import MemoryStorageAccount
from tests.effects.http_servers import KeyedProvider, serving
from tests.effects.test_performer import PlaceOrder
from tests.effects.test_wired_at_most_once import keyless_shop
from tests.effects.test_wiring import drain

REPO = Path(__file__).resolve().parents[1]
MESSAGING = "UseDevelopmentStorage=true"
ACCOUNT_KEY = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="


def config(**values: str) -> AppConfig:
    settings = resolve_settings(
        environ={"AzureWebJobsStorage": MESSAGING, **values}, local_file=None
    )
    return build_config(settings, root=REPO)


def app() -> BusApp:
    built = BusApp()
    built.endpoint("orders")
    built.endpoint("billing")
    return built


def test_unset_the_state_account_is_the_messaging_one() -> None:
    built = config()
    assert not built.settings.separate_state
    assert built.state_storage is built.storage
    assert built.require_state_storage() is built.require_storage()


def test_a_state_connection_string_is_read_from_the_setting_it_names() -> None:
    state = f"AccountName=stateacct;AccountKey={ACCOUNT_KEY};EndpointSuffix=core.windows.net"
    built = config(BUS_STATE_STORAGE_SETTING="AppState", AppState=state)
    assert built.settings.separate_state
    assert built.require_state_storage().connection_string == state
    assert built.require_storage().connection_string == DEV_CONNECTION_STRING
    source = built.require_state_storage().source
    assert source is not None
    assert source.setting == "AppState"


def test_a_state_account_by_identity_takes_the_account_name_and_client_id() -> None:
    built = config(
        BUS_STATE_STORAGE_SETTING="AppState",
        AppState__accountName="stateacct",
        AppState__credential="managedidentity",
        AppState__clientId="0000-client",
    )
    state = built.require_state_storage()
    assert state.uses_identity
    assert state.table_service_uri == "https://stateacct.table.core.windows.net"
    assert state.managed_identity
    assert state.client_id == "0000-client"


def test_the_emulator_is_accepted_for_the_state_account() -> None:
    built = config(BUS_STATE_STORAGE_SETTING="AppState", AppState="UseDevelopmentStorage=true")
    assert built.require_state_storage().connection_string == DEV_CONNECTION_STRING


def test_a_state_setting_naming_a_missing_connection_is_refused_at_start_up_by_name() -> None:
    with pytest.raises(ConfigurationError) as raised:
        config(BUS_STATE_STORAGE_SETTING="AppState")
    text = str(raised.value)
    assert "connection setting AppState" in text
    assert "BUS_STATE_STORAGE_SETTING" in text


def test_an_ambiguous_state_connection_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match="ambiguous storage connection: AppState"):
        config(
            BUS_STATE_STORAGE_SETTING="AppState",
            AppState="UseDevelopmentStorage=true",
            AppState__accountName="stateacct",
        )


def test_a_state_connection_that_is_not_one_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match="setting AppState is not a storage connection"):
        config(BUS_STATE_STORAGE_SETTING="AppState", AppState="Server=db;Password=x")


def test_naming_the_messaging_connection_is_one_account() -> None:
    built = config(BUS_STATE_STORAGE_SETTING="AzureWebJobsStorage")
    assert not built.settings.separate_state
    worker = Worker(app(), built, MemoryStorageAccount())
    assert worker.state_account() is worker.account()
    assert worker.bus().state is worker.bus().account


async def test_provisioning_puts_endpoint_tables_in_the_state_account_only() -> None:
    messaging, state = MemoryStorageAccount(), MemoryStorageAccount()
    resources = resources_for(app().endpoints)
    await provision(messaging, resources, state=state)
    alone = await check_storage(messaging, resources)
    assert sorted(alone.missing) == ["table billing", "table orders"]
    both = await check_storage(messaging, resources, state=state)
    assert both.healthy, both.as_dict()
    assert both.checked == alone.checked


async def test_health_names_the_account_a_resource_is_missing_from() -> None:
    messaging, state = MemoryStorageAccount(), MemoryStorageAccount()
    resources = resources_for(app().endpoints)
    await provision(messaging, resources)  # everything in messaging, as a single app does
    report = await check_storage(messaging, resources, state=state)
    assert sorted(report.missing) == [
        "table billing in the state account",
        "table orders in the state account",
    ]


async def test_the_performers_markers_are_in_the_state_account() -> None:
    messaging, state = MemoryStorageAccount(), MemoryStorageAccount()
    async with serving(KeyedProvider()) as server:
        built = Worker(
            keyless_shop(),
            config(
                BUS_STATE_STORAGE_SETTING="AppState",
                AppState="UseDevelopmentStorage=true",
                BUS_SERVICE_LEGACY_PAYMENTS_URL=server.url,
            ),
            messaging,
            state_account=state,
        )
        await provision(messaging, built.resources, state=state)
        client = built.bus().client()
        await client.send(PlaceOrder(order="o1", amount=700), to="orders", idempotency_key="o1")
        async with asyncio.timeout(30):
            await drain(built)
        await built.close()
    [key] = server.ledger
    assert await performer_markers(state).marked(key)
    with pytest.raises(NotFound):
        await messaging.table(PERFORMER_ENDPOINT).query(page_size=1)


def test_the_audit_refuses_an_app_whose_audit_rows_are_in_another_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no local.settings.json
    for name, value in {
        "AzureWebJobsStorage": MESSAGING,
        "BUS_STATE_STORAGE_SETTING": "AppState",
        "AppState": "UseDevelopmentStorage=true",
    }.items():
        monkeypatch.setenv(name, value)
    assert audit_main(["export", "--out", str(tmp_path / "export")]) == EXIT_ERROR
    error = capsys.readouterr().err
    assert "BUS_STATE_STORAGE_SETTING names a state account of its own (AppState)" in error
    assert not (tmp_path / "export").exists(), "nothing was read or written"
