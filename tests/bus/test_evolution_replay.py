"""A message of version 1 parked by a version-1 receiver is processed, once, by the next
version when it is replayed: by ``bus replay`` (every mode on the in-memory stores, token mode
on Azurite and PostgreSQL) and by the bulk replay's task (on Azurite, the storage it runs
against). The body is upcast 1 -> 2 -> 3 on the way in, as on any receive."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from lab.local.azurite import AzuriteEndpoints
from shared.bulk.replay import ReplayTask, replay_partition
from shared.bus import DoNotRetry, HandlerContext, Outcome
from shared.bus.app import Mode
from shared.bus.poison import read_poison, replay
from shared.settings import StorageSettings
from tests.bus.evolving import Shipments, Version1, Version3, sending_client
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.bus.test_evolution import receiver, seen
from tests.bus.test_retries import deliver_visible
from tests.conftest import Backend

UPCAST = "order=o5|street=Quay 5|city=Leiden|country=unknown"


async def parked_by_version_1(backend: Backend, mode: Mode) -> tuple[Harness, str, Counter[str]]:
    """A receiver of version 3 whose endpoint first runs version 1's handler (which refuses
    the message for good), as before a deploy; then version 3's handler is back."""
    harness, name, runs = await receiver(backend, mode, Version3.Ship)
    handlers = harness.app.get(name).handlers
    upgraded = handlers["Ship"]

    def refuse(ctx: HandlerContext[Shipments], message: Version1.Ship) -> None:
        raise DoNotRetry(f"no ships to {message.address} today")

    handlers["Ship"] = (Version1.Ship, refuse)
    sender = sending_client(harness.setup_bus, [name], Version1.Ship)
    shipment = Version1.Ship(order="o5", address="Quay 5, Leiden")
    await sender.send(shipment, to=name, idempotency_key="o5")
    assert await deliver_visible(harness, name) == Counter({Outcome.POISONED: 1})
    handlers["Ship"] = upgraded  # the deploy of version 3 is done
    return harness, name, runs


@pytest.mark.parametrize("backend", backend_modes(azurite=["token"]), indirect=True)
async def test_bus_replay_upcasts_a_message_version_1_parked(backend: Backend, mode: Mode) -> None:
    harness, name, runs = await parked_by_version_1(backend, mode)

    assert await replay(harness.raw, name) == 1
    assert await deliver_visible(harness, name) == Counter({Outcome.PROCESSED: 1})

    assert runs == Counter({"Ship": 1})
    assert await seen(harness, name, "o5") == [UPCAST]
    assert await harness.queue_depths() == {name: 0, f"{name}-poison": 0}


class Requests:
    """The bulk job's request counter (a Spark accumulator there)."""

    def __init__(self) -> None:
        self.made = 0

    def add(self, term: int) -> None:
        self.made += term


ON_AZURITE = pytest.param(("azurite", "token"), id="azurite-token", marks=pytest.mark.azurite)


@pytest.mark.parametrize("backend", [ON_AZURITE], indirect=True)
async def test_the_bulk_replay_task_upcasts_a_message_version_1_parked(
    backend: Backend, mode: Mode, azurite: AzuriteEndpoints
) -> None:
    harness, name, runs = await parked_by_version_1(backend, mode)
    [entry] = await harness.poison_messages(name)
    message_id = read_poison(json.dumps(entry)).message_id
    task = ReplayTask(
        StorageSettings(connection_string=azurite.connection_string),
        harness.config.parked_container,
    )
    requests = Requests()

    outcomes = await asyncio.to_thread(
        lambda: list(replay_partition(task, requests, [(name, [message_id])]))
    )

    assert [outcome[2] for outcome in outcomes] == ["sent"]
    assert requests.made > 0
    assert await deliver_visible(harness, name) == Counter({Outcome.PROCESSED: 1})
    assert runs == Counter({"Ship": 1})
    assert await seen(harness, name, "o5") == [UPCAST]
