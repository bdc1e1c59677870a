"""The system file (``shared.system``): the template's parameters file and a plain list both
read as the same system, each app's settings resolved over the tool's environment, and every
fault in the file refused naming the file and the app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.bus import BusApp
from shared.bus.app import Store
from shared.errors import ConfigurationError
from shared.sample import app as sample
from shared.system import load_system

PARAMETERS = Path(__file__).resolve().parents[1] / "infra" / "system.parameters.json"


def mixed_app() -> BusApp:
    """The sample system's orders with its storefront's sessions in PostgreSQL, as
    ``SAMPLE_STOREFRONT_STORE=postgres`` declares it (read when the module is imported)."""
    app = BusApp()
    app.endpoint("orders", state=sample.Order).handles(sample.PlaceOrder)(sample.place_order)
    app.endpoint("loyalty", state=sample.Customer).handles(sample.OrderPlaced)(sample.reward)
    app.endpoint("storefront", store="postgres", sessions=True)
    return app


mixed = mixed_app()
MIXED = "tests.test_system_file:mixed"


def documents_app(loyalty_store: Store, storefront_store: Store = "table") -> BusApp:
    """The sample system's orders with its loyalty points in ``loyalty_store`` (and, when
    asked, the storefront's sessions in PostgreSQL)."""
    app = BusApp()
    app.endpoint("orders", state=sample.Order).handles(sample.PlaceOrder)(sample.place_order)
    loyalty = app.endpoint("loyalty", state=sample.Customer, store=loyalty_store)
    loyalty.handles(sample.OrderPlaced)(sample.reward)
    if storefront_store != "table":
        app.endpoint("storefront", store=storefront_store, sessions=True)
    return app


in_cosmos = documents_app("cosmos")
in_blobs = documents_app("blob")
in_two_databases = documents_app("cosmos", storefront_store="postgres")
IN_COSMOS = "tests.test_system_file:in_cosmos"
IN_BLOBS = "tests.test_system_file:in_blobs"
IN_TWO_DATABASES = "tests.test_system_file:in_two_databases"


def orders(**extra: Any) -> dict[str, Any]:
    return {"name": "orders", "busApp": "shared.sample.system:orders", "store": "table", **extra}


def shipping(**extra: Any) -> dict[str, Any]:
    return {"name": "shipping", "busApp": "shared.sample.system:shipping", "store": "table"} | extra


def written(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "system.json"
    path.write_text(json.dumps(document))
    return path


def test_the_template_parameters_file_is_a_system_file() -> None:
    system = load_system(PARAMETERS, environ={})
    assert [app.name for app in system.apps] == ["orders", "payments", "shipping"]
    payments = system.apps[1]
    assert payments.store == "postgres"
    assert payments.settings.get("BUS_APP") == "shared.sample.system:payments"
    assert payments.settings.get("BUS_APP_NAME") == "payments"
    # The deployed app's own settings are the app's settings for the tools too.
    assert payments.settings.get("BUS_SERVICE_PROVIDER_URL") == "https://provider.example.com"
    loaded = {app.name: app for app in system.load()}
    assert loaded["payments"].app.running_endpoints("payments") == ["payments", "paymentseffects"]
    assert loaded["orders"].config.cleanup.checkpoint_table == "orderscleanup"
    assert loaded["shipping"].config.app_name == "shipping"


def test_an_apps_settings_win_over_the_environment_and_say_where_they_came_from(
    tmp_path: Path,
) -> None:
    path = written(
        tmp_path, {"apps": [orders(settings={"CLEANUP_GRACE_SECONDS": "900"}), shipping()]}
    )
    environ = {"CLEANUP_GRACE_SECONDS": "700", "BUS_APP_NAME": "intruder", "BUS_APP": "x:y"}
    first, second = load_system(path, environ=environ).apps
    assert first.settings.get("CLEANUP_GRACE_SECONDS") == "900"
    assert first.settings.origin("CLEANUP_GRACE_SECONDS") == f"system file {path} (app orders)"
    assert second.settings.get("CLEANUP_GRACE_SECONDS") == "700"
    assert second.settings.get("BUS_APP_NAME") == "shipping"
    assert second.settings.get("BUS_APP") == "shared.sample.system:shipping"


def test_a_settings_file_is_read_relative_to_the_system_file(tmp_path: Path) -> None:
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "orders.json").write_text(
        json.dumps({"Values": {"AzureWebJobsStorage": "UseDevelopmentStorage=true"}})
    )
    path = written(tmp_path, {"apps": [orders(settingsFile="apps/orders.json")]})
    (app,) = load_system(path, environ={}).apps
    assert app.settings.get("AzureWebJobsStorage") == "UseDevelopmentStorage=true"


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ([], "expected a JSON object"),
        ({"apps": []}, "must be a non-empty list"),
        ({"parameters": {"apps": {"value": "orders"}}}, "parameters.apps.value must be"),
        ({"apps": [orders()], "extra": 1}, "unknown key(s) 'extra'"),
        ({"apps": [orders(colour="red")]}, "app orders: unknown key(s) 'colour'"),
        ({"apps": [orders(name="Orders")]}, "app 1: invalid app name 'Orders'"),
        ({"apps": [orders(name="x" * 40)]}, "app 1: invalid app name"),
        ({"apps": [orders(), orders()]}, "app orders is listed twice"),
        ({"apps": [orders(store="mongo")]}, "store 'mongo' is not one of"),
        ({"apps": [orders(store="Cosmos")]}, "store 'Cosmos' is not one of"),
        ({"apps": [orders(store=["cosmos", "postgres"])]}, "store must be a non-empty string"),
        ({"apps": [orders(busApp=7)]}, "app orders: busApp must be a non-empty string"),
        ({"apps": [orders(settings={"BUS_X": 1})]}, "settings must be an object of string"),
        ({"apps": [orders(settings={"BUS_APP_NAME": "b"})]}, "settings sets BUS_APP_NAME"),
        ({"apps": [orders(appSettings={"BUS_APP": "a:b"})]}, "appSettings sets BUS_APP"),
        ({"apps": [orders(settings={}, settingsFile="x.json")]}, "not both"),
        ({"apps": [orders(settingsFile="absent.json")]}, "absent.json does not exist"),
    ],
)
def test_a_faulty_system_file_is_refused_naming_the_file_and_the_app(
    tmp_path: Path, document: object, says: str
) -> None:
    path = written(tmp_path, document)
    with pytest.raises(ConfigurationError) as refused:
        load_system(path, environ={})
    assert says in str(refused.value)
    assert f"system file {path}" in str(refused.value)


def test_a_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "system.json"
    path.write_text("{apps:")
    with pytest.raises(ConfigurationError, match="cannot read system file"):
        load_system(path, environ={})


@pytest.mark.parametrize(
    ("apps", "says"),
    [
        # Two names, one app: both would run the endpoints orders and loyalty.
        ([orders(), orders(name="orders2")], "app orders2: endpoint orders is also app orders'"),
        ([orders(busApp="shared.sample.system:nothing")], "app orders: BUS_APP="),
        ([shipping(store="postgres")], "store is postgres, but endpoint(s) shipping"),
        # A database none was deployed for.
        ([orders(busApp=MIXED)], "store is table, but endpoint(s) storefront of "),
        ([orders(settings={"CLEANUP_GRACE_SECONDS": "soon"})], "app orders: "),
        # Cosmos DB endpoints in an app whose account none was deployed for.
        (
            [orders(busApp=IN_COSMOS)],
            f"store is table, but endpoint(s) loyalty of {IN_COSMOS} keep their rows in "
            "Cosmos DB (give the app store cosmos",
        ),
        ([orders(busApp=IN_COSMOS, store="postgres")], "keep their rows in Cosmos DB"),
        ([orders(busApp=IN_COSMOS, store="blob")], "keep their rows in Cosmos DB"),
        # A store whose database (or documents) none of the app's endpoints uses.
        (
            [orders(busApp=IN_BLOBS, store="cosmos")],
            "store is cosmos, but endpoint(s) loyalty, orders of "
            f"{IN_BLOBS} keep their rows in another store (none in Cosmos DB)",
        ),
        ([orders(store="blob")], "store is blob, but endpoint(s) "),
        ([orders(store="blob")], "(none in blob documents)"),
        # One database beside the state account per app of a system, whichever is named.
        ([orders(busApp=IN_TWO_DATABASES, store="cosmos")], "storefront of "),
        ([orders(busApp=IN_TWO_DATABASES, store="postgres")], "one database beside its state"),
    ],
)
def test_apps_that_cannot_run_side_by_side_are_refused_when_loaded(
    tmp_path: Path, apps: list[dict[str, Any]], says: str
) -> None:
    system = load_system(written(tmp_path, {"apps": apps}), environ={})
    with pytest.raises(ConfigurationError) as refused:
        system.load()
    assert says in str(refused.value)


def test_a_postgres_app_may_keep_some_endpoints_in_its_state_account(tmp_path: Path) -> None:
    """Every app has a state account; store postgres adds a database for the endpoints that
    keep their rows there (here the storefront's sessions), the others stay in the account."""
    entry = orders(busApp=MIXED, store="postgres")
    (loaded,) = load_system(written(tmp_path, {"apps": [entry]}), environ={}).load()
    stores = {name: e.store for name, e in loaded.app.endpoints.items()}
    assert stores == {"orders": "table", "loyalty": "table", "storefront": "postgres"}


@pytest.mark.parametrize(
    ("bus_app", "store", "where"),
    [
        (IN_COSMOS, "cosmos", {"orders": "table", "loyalty": "cosmos"}),
        (IN_BLOBS, "blob", {"orders": "table", "loyalty": "blob"}),
        # Blob documents and tables both live in the app's own state account.
        (IN_BLOBS, "table", {"orders": "table", "loyalty": "blob"}),
    ],
)
def test_an_app_keeps_its_rows_in_the_store_deployed_for_it(
    tmp_path: Path, bus_app: str, store: str, where: dict[str, str]
) -> None:
    entry = orders(busApp=bus_app, store=store)
    (loaded,) = load_system(written(tmp_path, {"apps": [entry]}), environ={}).load()
    assert loaded.entry.store == store
    assert {name: e.store for name, e in loaded.app.endpoints.items()} == where
