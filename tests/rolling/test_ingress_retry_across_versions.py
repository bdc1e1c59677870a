"""A client's retry that straddles a rolling deploy: its first request was taken by an
instance of one version of the app, the retry (same key, same request) reaches one of the
other. The key's ingress record must answer it with the first send's receipt, as it does when
both requests reach the same version: anything else makes a client that lost its answer send
the message again under a new key. Version 2 changed each of the three messages asked for
here the way a message evolves: PlaceOrder gained a field with a default, ShipOrder lost one
its clients still send, ReserveStock was renamed HoldStock (``app_v2``).

In memory: the two apps' HTTP ingress on one account, as two instances see it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared import http_ingress
from shared.bus import Bus, BusConfig
from shared.provisioning import provision
from shared.resources import resources_for
from shared.stores.memory import MemoryStorageAccount
from tests.rolling import app_v1, app_v2

ORDER: dict[str, Any] = {"type": "PlaceOrder", "body": {"order_id": "o-1", "amount_cents": 1250}}
"""Version 2 reads it with ``gift_wrap=False`` added."""
SHIPPING: dict[str, Any] = {
    "type": "ShipOrder",
    "to": "shipping",
    "body": {"order_id": "o-1", "priority": "express"},
}
"""Version 2 reads it without ``priority``."""
STOCK: dict[str, Any] = {
    "type": "ReserveStock",
    "to": "stock",
    "body": {"order_id": "o-1", "quantity": 1},
}
"""Version 2 reads it as HoldStock (its former name)."""
CHANGES = {"field added": ORDER, "field removed": SHIPPING, "type renamed": STOCK}
ORDERS = [(1, 2), (2, 1)]
"""Which version takes the first request, which the retry: a deploy's instances are
replaced one at a time, so either may come first."""


async def instances(scoped_from: int = 3) -> dict[int, Bus]:
    """Version 1's and version 2's instance on one account; versions from ``scoped_from`` on
    record under scoped keys (BUS_INGRESS_KEY_SCOPES on)."""
    account = MemoryStorageAccount()
    await provision(account, resources_for(app_v1.app.endpoints))
    apps = {1: app_v1.app, 2: app_v2.app}
    return {
        v: Bus(app, account, BusConfig(ingress_key_scopes=v >= scoped_from))
        for v, app in apps.items()
    }


async def post(bus: Bus, request: dict[str, Any], key: str) -> http_ingress.Answer:
    return await http_ingress.handle(bus, {"idempotency-key": key}, json.dumps(request).encode())


async def tokens(bus: Bus) -> list[str]:
    """Every message token written: one per message sent (a retry re-sends only signals)."""
    return [b.name async for b in bus.account.blob_container(bus.config.tokens_container).list()]


def another(request: dict[str, Any]) -> dict[str, Any]:
    """A different request of the same type: another order."""
    return {**request, "body": {**request["body"], "order_id": "o-2"}}


async def test_a_retry_reaching_the_same_version_gets_the_first_receipt() -> None:
    version_1 = (await instances())[1]
    first = await post(version_1, ORDER, "k1")
    again = await post(version_1, ORDER, "k1")
    assert (first.status, again.status) == (202, 200)
    assert again.body["message_ids"] == first.body["message_ids"]


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize(("first_by", "retry_by"), ORDERS)
async def test_a_retry_reaching_the_other_version_gets_the_first_receipt(
    change: str, first_by: int, retry_by: int
) -> None:
    buses = await instances()
    request = CHANGES[change]
    first = await post(buses[first_by], request, "k1")
    sent = await tokens(buses[first_by])

    again = await post(buses[retry_by], request, "k1")

    assert (first.status, again.status) == (202, 200), again.body
    assert again.body == {**first.body, "deduplicated": True}
    assert len(sent) == 1
    assert await tokens(buses[retry_by]) == sent  # nothing sent twice


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize(("first_by", "retry_by"), [(1, 1), (2, 2), *ORDERS])
async def test_a_different_request_under_the_same_key_is_refused_by_either_version(
    change: str, first_by: int, retry_by: int
) -> None:
    buses = await instances()
    request = CHANGES[change]
    first = await post(buses[first_by], request, "k1")
    sent = await tokens(buses[first_by])

    other = await post(buses[retry_by], another(request), "k1")

    assert (first.status, other.status) == (202, 409), other.body
    assert "'k1' was already used for a different message" in other.body["error"]
    assert await tokens(buses[retry_by]) == sent


async def test_the_same_message_asked_for_differently_is_still_the_same_message() -> None:
    """What version 2's model reads alike is one message, as before requests had their own
    fingerprint: the default sent explicitly matches the record of a request without it."""
    version_2 = (await instances())[2]
    first = await post(version_2, ORDER, "k1")
    explicit = {**ORDER, "body": {**ORDER["body"], "gift_wrap": False}}

    again = await post(version_2, explicit, "k1")

    assert (first.status, again.status) == (202, 200)
    assert again.body["message_ids"] == first.body["message_ids"]


async def test_a_raw_key_record_of_the_former_type_name_answers_a_scoped_instances_retry() -> None:
    """Version 1 recorded ReserveStock under the raw key (key scopes still off); version 2,
    with scopes switched on, reads that record as one of the previous layout, which must be
    of the message's type: HoldStock, by its former name."""
    buses = await instances(scoped_from=2)
    first = await post(buses[1], STOCK, "k1")

    again = await post(buses[2], STOCK, "k1")

    assert (first.status, again.status) == (202, 200), again.body
    assert again.body["message_ids"] == first.body["message_ids"]
    assert (await post(buses[2], another(STOCK), "k1")).status == 409
