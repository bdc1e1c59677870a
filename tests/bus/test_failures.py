"""Bad input and failing handlers: clear reasons, the poison queue, nothing lost.

Every endpoint mode on the in-memory stores; token mode on Azurite too (what is checked here
is common to the modes: ``shared.bus.pipeline``)."""

from __future__ import annotations

import json

import pytest

from shared.bus import Bus, BusApp, Command, HandlerContext, Outcome
from shared.bus.app import Mode
from shared.bus.envelope import Signal
from shared.bus.ids import fresh_id
from shared.bus.poison import replay, unwrap
from shared.errors import InvalidName, MessageTooLarge
from shared.resources import poison_queue
from tests.bus.flow import Ledger, PlaceOrder
from tests.bus.harness import (
    Harness,
    backend_modes,
    endpoint_mode,  # noqa: F401  (fixture "mode")
    per_mode_backend,  # noqa: F401  (fixture "backend": one per store and mode)
)
from tests.conftest import Backend, unique_name

pytestmark = pytest.mark.parametrize("backend", backend_modes(azurite=["token"]), indirect=True)


class Flaky(Command):
    partition_by = "key"
    key: str
    size: int = 0


def flaky_app(name: str, failures: dict[str, int], mode: Mode = "token") -> BusApp:
    """An endpoint whose handler fails while ``failures['left']`` is positive."""
    app = BusApp()
    endpoint = app.endpoint(name, state=Ledger, mode=mode)

    @endpoint.handles(Flaky)
    def handle(ctx: HandlerContext[Ledger], cmd: Flaky) -> None:
        ctx.state.applied.append(ctx.message_id)
        if failures["left"] > 0:
            failures["left"] -= 1
            raise RuntimeError("payment provider unavailable")
        if cmd.size:
            ctx.send(Flaky(key=cmd.key + "x", size=0), to=name, headers={"pad": "x" * cmd.size})

    return app


@pytest.fixture
def endpoint_name() -> str:
    return f"flaky{unique_name('')[:8]}"


_MESSAGE, _ATTEMPT = "0f0e0d0c-0b0a-4908-8706-050403020100", "1f0e0d0c-0b0a-4908-8706-050403020100"


def _hinted(etag: str = '"0x8DBF3F9B7D4A1C2"', envelope: str | None = "{}") -> str:
    """A signal whose names are valid but whose token hints are not."""
    return json.dumps(
        {
            "message_id": _MESSAGE,
            "attempt_id": _ATTEMPT,
            "token": f"client/2f0e0d0c-0b0a-4908-8706-050403020100/{_ATTEMPT}/{_MESSAGE}",
            "partition_key": "p",
            "etag": etag,
            **({} if envelope is None else {"envelope": envelope}),
        }
    )


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("not json", "not JSON"),
        ('{"message_id": "x"}', "wrong schema"),
        (
            json.dumps(
                {
                    "message_id": "a",
                    "attempt_id": "b",
                    "token": "../../etc/passwd",
                    "partition_key": "p",
                }
            ),
            "outside the token naming scheme",
        ),
        (
            json.dumps(
                {
                    "message_id": "a",
                    "attempt_id": "b",
                    "token": "other-container/x",
                    "partition_key": "p",
                    "extra": 1,
                }
            ),
            "wrong schema",
        ),
        (_hinted(etag='"0x1"\r\nx-ms-delete-snapshots: include'), "is not an ETag"),
        (_hinted(envelope=None), "ETag and envelope together"),
        (_hinted(envelope="{" + " " * 9000 + "}"), "envelope copy is 9002 characters"),
    ],
)
async def test_malformed_signals_are_parked_with_a_reason_and_read_nothing(
    backend: Backend, mode: Mode, endpoint_name: str, raw: str, reason: str
) -> None:
    harness = await Harness.create(backend, flaky_app(endpoint_name, {"left": 0}, mode))
    await harness.raw.queue(endpoint_name).send(raw)

    await harness.run_until_quiet()

    [parked] = await harness.poison_messages(endpoint_name)
    assert parked["signal"] == raw
    assert reason in str(parked["poison"])
    assert harness.outcomes[Outcome.POISONED] == 1
    assert harness.instrumentation.kinds_since(0)["blob.read"] == 0


async def test_a_signal_whose_ids_disagree_with_its_token_name_is_refused(
    backend: Backend, mode: Mode, endpoint_name: str
) -> None:
    harness = await Harness.create(backend, flaky_app(endpoint_name, {"left": 0}, mode))
    sender, incoming, attempt, out = "client", fresh_id(), fresh_id(), fresh_id()
    raw = Signal(
        message_id=fresh_id(),
        attempt_id=attempt,
        token=f"{sender}/{incoming}/{attempt}/{out}",
        partition_key="p",
    ).to_json()
    await harness.raw.queue(endpoint_name).send(raw)

    await harness.run_until_quiet()

    [parked] = await harness.poison_messages(endpoint_name)
    assert "does not match its token name" in str(parked["poison"])


async def test_an_unknown_message_type_is_parked_and_replayable_once_handled(
    backend: Backend, mode: Mode, endpoint_name: str
) -> None:
    """A message sent by a newer version of the app, before the receiver's handler was
    deployed, waits in the poison queue with its token intact; after the deployment, a
    replay processes it exactly once. (With no give-back window: it parks at once; the
    give-back itself is tests/bus/test_give_back.py.)"""
    without = BusApp()
    without.endpoint(endpoint_name, state=Ledger, mode=mode)
    harness = await Harness.create(backend, without, give_back_seconds=0)
    newer = Bus(flaky_app(endpoint_name, {"left": 0}, mode), harness.raw, harness.config)
    await newer.client().send(Flaky(key="k"), to=endpoint_name, idempotency_key="k1")
    await harness.run_until_quiet()
    [parked] = await harness.poison_messages(endpoint_name)
    assert "has no handler for message type 'Flaky'" in str(parked["poison"])
    assert len(await harness.tokens()) == 1

    fixed = Harness(backend, flaky_app(endpoint_name, {"left": 0}, mode), harness.config)
    assert await replay(fixed.raw, endpoint_name) == 1
    await fixed.run_until_quiet()

    assert len(await fixed.applied(endpoint_name)) == 1
    assert await fixed.tokens_in_flight() == []
    assert await fixed.raw.queue(poison_queue(endpoint_name)).approximate_count() == 0


async def test_a_body_that_breaks_the_schema_is_parked_with_the_validation_error(
    backend: Backend, mode: Mode, endpoint_name: str
) -> None:
    harness = await Harness.create(backend, flaky_app(endpoint_name, {"left": 0}, mode))
    handlers = harness.app.get(endpoint_name).handlers
    handlers["PlaceOrder"] = (PlaceOrder, lambda c, m: None)  # as the sender's version has it
    await harness.setup_bus.client().send(
        PlaceOrder(order_id="o", amount=1), to=endpoint_name, idempotency_key="k"
    )
    # Same type name as the registered model, different fields.
    harness.app.get(endpoint_name).handlers["PlaceOrder"] = (Flaky, lambda c, m: None)

    await harness.run_until_quiet()

    [parked] = await harness.poison_messages(endpoint_name)
    assert "does not match its schema" in str(parked["poison"])
    assert len(await harness.tokens()) == 1


async def test_handler_errors_go_to_the_host_retries_then_succeed_exactly_once(
    backend: Backend, mode: Mode, endpoint_name: str
) -> None:
    failures = {"left": 2}
    harness = await Harness.create(backend, flaky_app(endpoint_name, failures, mode))
    await harness.setup_bus.client().send(Flaky(key="k"), to=endpoint_name, idempotency_key="k")

    await harness.run_until_quiet()

    assert failures["left"] == 0
    assert len(await harness.applied(endpoint_name)) == 1
    assert await harness.tokens_in_flight() == []


async def test_a_handler_that_keeps_failing_is_poisoned_then_replayed_exactly_once(
    backend: Backend, mode: Mode, endpoint_name: str
) -> None:
    failures = {"left": 1000}
    harness = await Harness.create(backend, flaky_app(endpoint_name, failures, mode))
    for worker in harness.workers.values():
        worker.settings = type(worker.settings)(max_dequeue_count=3, lease_seconds=30)
    await harness.setup_bus.client().send(Flaky(key="k"), to=endpoint_name, idempotency_key="k")

    await harness.run_until_quiet()
    assert failures["left"] == 997
    [parked] = await harness.raw.queue(poison_queue(endpoint_name)).peek()
    moved = unwrap(parked.content)  # moved by the host, with the last error
    assert moved.signal is not None
    assert Signal.parse(moved.signal)
    assert moved.reason.startswith("RuntimeError: payment provider unavailable")
    assert await harness.applied(endpoint_name) == []

    failures["left"] = 0
    assert await replay(harness.raw, endpoint_name) == 1
    await harness.run_until_quiet()
    assert await replay(harness.raw, endpoint_name) == 0

    assert len(await harness.applied(endpoint_name)) == 1
    assert await harness.tokens_in_flight() == []


async def test_oversized_payloads_are_refused_at_send_time(
    backend: Backend, mode: Mode, endpoint_name: str
) -> None:
    harness = await Harness.create(
        backend, flaky_app(endpoint_name, {"left": 0}, mode), max_payload_bytes=256
    )
    client = harness.setup_bus.client()
    with pytest.raises(MessageTooLarge, match="limit is 256"):  # a key Table Storage takes
        await client.send(Flaky(key="k" * 300), to=endpoint_name, idempotency_key="big")
    assert await harness.tokens_in_flight() == []
    assert await harness.raw.queue(endpoint_name).approximate_count() == 0

    with pytest.raises(InvalidName):
        await client.send(Flaky(key="k"), to="Not An Endpoint", idempotency_key="k")
    with pytest.raises(InvalidName):
        await client.send(Flaky(key="k"), to=endpoint_name, idempotency_key="a/b")


async def test_a_client_retry_with_the_same_key_sends_once(
    backend: Backend, mode: Mode, endpoint_name: str
) -> None:
    harness = await Harness.create(backend, flaky_app(endpoint_name, {"left": 0}, mode))
    client = harness.setup_bus.client()

    first = await client.send(Flaky(key="k"), to=endpoint_name, idempotency_key="same")
    again = await client.send(Flaky(key="k"), to=endpoint_name, idempotency_key="same")
    await harness.run_until_quiet()

    assert not first.deduplicated
    assert again.deduplicated
    assert again.message_ids == first.message_ids
    assert len(await harness.applied(endpoint_name)) == 1


async def test_subscribing_is_idempotent_and_unsubscribing_stops_delivery(
    backend: Backend,
    mode: Mode,
) -> None:
    from tests.bus.flow import FlowNames, build_flow

    names = FlowNames.with_suffix(unique_name("")[:8])
    harness = await Harness.create(backend, build_flow(names, charge=False, mode=mode))
    topics = harness.setup_bus.topics
    assert await topics.subscribe("orderplaced", names.loyalty) is False
    assert set(await topics.subscribers("orderplaced")) == {names.loyalty, names.shipping}

    assert await topics.unsubscribe("orderplaced", names.loyalty) is True
    assert await topics.unsubscribe("orderplaced", names.loyalty) is False
    await harness.setup_bus.client().send(
        PlaceOrder(order_id="o", amount=1), to=names.orders, idempotency_key="k"
    )
    await harness.run_until_quiet()

    assert await harness.applied(names.loyalty) == []
    assert len(await harness.applied(names.shipping)) == 1
