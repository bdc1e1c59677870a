"""An app's name scopes every name of its own (ingress, cleanup, journal, archive, audits, the
effects performer), so that the apps of a system share one messaging account without
colliding; an app without a name keeps the names a single app has always had."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared import runtime
from shared.app_settings import APP_NAME_MAX_CHARS
from shared.bus import BusApp, HandlerContext
from shared.bus.effects import EffectRequest
from shared.config import build_config
from shared.errors import ConfigurationError, InvalidName
from shared.provisioning import provision
from shared.resources import resources_for
from shared.settings import resolve_settings
from shared.stores.memory import MemoryStorageAccount
from tests.effects.test_performer import Order, PlaceOrder
from tests.effects.test_wiring import RefundAnswered

REPO = Path(__file__).resolve().parents[1]
URL = {"BUS_SERVICE_CARD_PAYMENTS_URL": "https://pay.example"}


def shop(name: str | None = None) -> BusApp:
    """An app declaring a service, so that its worker adds the effects performer."""
    app = BusApp(name=name)
    orders = app.endpoint("orders", Order)

    @orders.handles(PlaceOrder)
    def place(ctx: HandlerContext[Order], cmd: PlaceOrder) -> None:
        ctx.request_effect(
            service="card-payments", operation="refund", body={}, answer=RefundAnswered
        )

    app.service("card-payments", operations={"refund": "/v1/refunds"})
    return app


def worker(app: BusApp, **values: str) -> runtime.Worker:
    settings = resolve_settings(environ={**URL, **values}, local_file=None)
    return runtime.Worker(app, settings, MemoryStorageAccount())


def names(built: runtime.Worker) -> dict[str, object]:
    """Every name the worker's bus, cleanup and provisioning use."""
    bus, cleanup = built.config, built.app_config.cleanup
    return {
        "containers": built.resources.containers,
        "tables": built.resources.tables,
        "endpoints": built.resources.endpoints,
        "bus": (
            bus.tokens_container,
            bus.topics_container,
            bus.parked_container,
            bus.payloads_container,
            bus.ingress_table,
            bus.actions_table,
            bus.discarded_container,
            bus.audits_container,
            bus.performer_endpoint,
        ),
        "checkpoints": cleanup.checkpoint_table,
    }


def test_an_app_without_a_name_keeps_the_names_a_single_app_has_today() -> None:
    """A deployed app upgraded without a name finds its ingress records, checkpoints, journal
    and archive where it left them."""
    assert names(worker(shop())) == {
        "containers": {
            "tokens": "tokens",
            "topics": "topics",
            "parked": "parked",
            "payloads": "payloads",
            "discarded": "discarded",
            "audits": "audits",
        },
        "tables": {"ingress": "ingress", "cleanup": "cleanup", "actions": "operatoractions"},
        "endpoints": ("orders", "effects"),
        "bus": (
            "tokens",
            "topics",
            "parked",
            "payloads",
            "ingress",
            "operatoractions",
            "discarded",
            "audits",
            "effects",
        ),
        "checkpoints": "cleanup",
    }


def test_a_named_app_scopes_its_own_names_and_shares_the_messaging_containers() -> None:
    assert names(worker(shop("billing"))) == {
        "containers": {
            "tokens": "tokens",
            "topics": "topics",
            "parked": "parked",
            "payloads": "payloads",
            "discarded": "billing-discarded",
            "audits": "billing-audits",
        },
        "tables": {
            "ingress": "billingingress",
            "cleanup": "billingcleanup",
            "actions": "billingoperatoractions",
        },
        "endpoints": ("orders", "billingeffects"),
        "bus": (
            "tokens",
            "topics",
            "parked",
            "payloads",
            "billingingress",
            "billingoperatoractions",
            "billing-discarded",
            "billing-audits",
            "billingeffects",
        ),
        "checkpoints": "billingcleanup",
    }


def test_the_app_setting_wins_over_the_declared_name() -> None:
    built = worker(shop("billing"), BUS_APP_NAME="shipping")
    assert built.app_config.app_name == "shipping"
    assert built.config.ingress_table == "shippingingress"
    assert built.app_config.cleanup.checkpoint_table == "shippingcleanup"
    assert "shippingeffects" in built.resources.endpoints
    assert worker(shop(), BUS_APP_NAME="shipping").config.ingress_table == "shippingingress"


@pytest.mark.parametrize(
    "name", ["Shop", "1shop", "shop-a", "shop_a", "", "a" * (APP_NAME_MAX_CHARS + 1), "shöp"]
)
def test_a_bad_name_is_refused_in_code_and_in_the_setting_naming_it(name: str) -> None:
    with pytest.raises(InvalidName, match="invalid app name"):
        BusApp(name=name)
    if name:  # a blank setting is an unset one
        with pytest.raises(ConfigurationError, match="BUS_APP_NAME"):
            worker(shop(), BUS_APP_NAME=name)


def test_the_longest_name_keeps_every_derived_name_inside_azures_rules() -> None:
    """Every derived name is checked against Azure's rules as it is made: the longest
    accepted name makes them all, the performer's endpoint (at most 40 characters) the
    longest of them."""
    longest = "a" * APP_NAME_MAX_CHARS
    built = worker(shop(longest))
    assert built.config.performer_endpoint == longest + "effects"
    assert len(built.config.performer_endpoint) == 40
    assert built.resources.containers["discarded"] == f"{longest}-discarded"


def test_an_endpoint_named_like_one_of_the_apps_own_tables_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="shopingress"):
        resources_for(["orders", "shopingress"], "shop")


def test_a_worker_refuses_a_configuration_built_for_another_name() -> None:
    """A configuration built without the app's declared name would put the app's ingress
    records and checkpoints in the unnamed app's tables."""
    settings = resolve_settings(environ=URL, local_file=None)
    with pytest.raises(ConfigurationError, match="app_name"):
        runtime.Worker(shop("billing"), build_config(settings, root=REPO), MemoryStorageAccount())
    built = build_config(settings, root=REPO, app_name="billing")
    assert runtime.Worker(shop("billing"), built, MemoryStorageAccount()).config.ingress_table == (
        "billingingress"
    )


async def test_a_named_apps_effect_requests_go_to_its_own_performer() -> None:
    built = worker(shop("billing"))
    await provision(built.account(), built.resources)
    await (
        built.bus()
        .client()
        .send(PlaceOrder(order="o1", amount=1), to="orders", idempotency_key="o1")
    )
    [signal] = await built.account().queue("orders").receive(1, visibility_timeout=30)
    await built.receive("orders", signal.content.encode(), 1)

    [request] = await built.account().queue("billingeffects").peek(1)
    assert EffectRequest.type_name() in request.content
    assert built.app.endpoints["billingeffects"].handler_for(EffectRequest.type_name())
