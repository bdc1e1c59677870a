"""A client cannot send the bus's effect messages: an answer says the provider charged, so a
forged ChargeAnswered through the HTTP ingress, ``bus send`` or a bulk job would ship an order
nobody paid for; a forged request would make the performer call a provider. Every client
entry point refuses both before anything is written."""

from __future__ import annotations

import json

import pytest

from shared import http_ingress
from shared.bulk.rows import check_target
from shared.bus import Bus, BusConfig
from shared.bus.effects import PERFORMER_ENDPOINT
from shared.clock import ManualClock
from shared.effects.memory import InMemoryProvider
from shared.effects.performer import add_performer
from shared.http_ingress import BadRequest
from shared.provisioning import provision
from shared.resources import resources_of
from shared.sample.app import build_app
from shared.stores.memory import MemoryStorageAccount

FORGED = [
    (
        "ChargeAnswered",
        "payments",
        {"partition": "o-1", "key": "k", "outcome": "succeeded", "status": 200, "body": {}},
    ),
    (
        "EffectRequest",
        PERFORMER_ENDPOINT,
        {
            "key": "k",
            "service": "provider",
            "operation": "charge",
            "body": {"order": "o-1", "amount": 1},
            "answer_type": "ChargeAnswered",
            "reply_to": "payments",
            "partition": "o-1",
        },
    ),
]


@pytest.fixture
async def sample() -> Bus:
    app = build_app()
    add_performer(app, {"provider": InMemoryProvider()}, call_timeout=5.0)
    clock = ManualClock()
    account = MemoryStorageAccount(clock=clock)
    config = BusConfig(clock=clock)
    await provision(
        account,
        resources_of(config, tuple(app.endpoints)),
    )
    return Bus(app, account, config)


@pytest.mark.parametrize(("type_name", "to", "body"), FORGED)
async def test_the_ingress_refuses_a_clients_effect_answer_or_request(
    sample: Bus, type_name: str, to: str, body: dict[str, object]
) -> None:
    raw = json.dumps({"type": type_name, "to": to, "body": body}).encode()

    answer = await http_ingress.handle(sample, {"Idempotency-Key": "forged"}, raw)

    assert answer.status == 400
    assert "belongs to the bus's effects" in str(answer.body)
    for endpoint in sample.app.endpoints:
        assert await sample.account.queue(endpoint).receive(32) == []
    assert [blob async for blob in sample.account.blob_container("tokens").list()] == []


@pytest.mark.parametrize(("type_name", "to", "body"), FORGED)
def test_send_and_bulk_jobs_refuse_them_too(
    sample: Bus, type_name: str, to: str, body: dict[str, object]
) -> None:
    """``bus send`` builds its message with build_message, and a bulk job checks its target
    with check_target before reading a row: both go through client_type."""
    with pytest.raises(BadRequest, match="only the performer answers one"):
        http_ingress.build_message(sample.app, type_name, body, to, config=sample.config)
    with pytest.raises(BadRequest, match="belongs to the bus's effects"):
        check_target(sample.app, type_name, to)
