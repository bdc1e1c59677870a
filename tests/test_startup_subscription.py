"""The app subscribes its endpoints on the first invocation of its functions in a process:
once, idempotently, concurrency-safe, never failing the invocation; a failure is logged and
tried again later; ``BUS_AUTO_SUBSCRIBE=false`` switches it off. Health and the bindings
report and trigger it (``shared.startup_subscription``)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import replace

import azure.functions as func
import pytest

from lab.local.azurite import AzuriteEndpoints
from shared import runtime
from shared.bindings import blueprint
from shared.bus import BusConfig
from shared.bus.subscriptions import handled_topics
from shared.clock import ManualClock
from shared.config import build_config
from shared.errors import ConfigurationError
from shared.provisioning import provision
from shared.sample.app import app as sample_app
from shared.settings import DEV_KEY, StorageSettings
from shared.startup_subscription import RETRY_SECONDS
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.stores.memory import MemoryStorageAccount
from tests.conftest import sample_settings
from tests.frozen_azurite import FreezableAzurite, started_freezable

SUBSCRIBED = "start-up subscription: "
FROZEN_ORDER = {"order_id": "frozen1", "customer": "ada", "amount_cents": 100}
TOPICS = BusConfig().topics_container


def worker(
    account: StorageAccount,
    clock: ManualClock | None = None,
    **settings: str,
) -> runtime.Worker:
    """The sample app's worker on ``account``, its bus on ``clock``."""
    config = build_config(sample_settings(**settings))
    config = replace(config, bus=replace(config.bus, clock=clock or ManualClock()))
    return runtime.Worker(sample_app, config, account)


async def subscribers(account: MemoryStorageAccount, topic: str) -> list[str]:
    blob = await account.blob_container(TOPICS).read(f"{topic}.json")
    return list(json.loads(blob.data)["subscribers"])


async def provisioned() -> MemoryStorageAccount:
    account = MemoryStorageAccount()
    await provision(account, runtime.Worker(sample_app, sample_settings(), account).resources)
    return account


def successes(caplog: pytest.LogCaptureFixture) -> int:
    """How many times the subscription ran to the end (it logs that once at info)."""
    return sum(
        r.levelno == logging.INFO and r.getMessage().startswith(SUBSCRIBED) for r in caplog.records
    )


async def test_the_first_invocation_subscribes_every_handling_endpoint() -> None:
    account = await provisioned()
    app_worker = worker(account)
    assert app_worker.subscription.state == "pending"
    await app_worker.serving()
    assert app_worker.subscription.state == "done"
    expected = handled_topics(sample_app)
    assert expected  # the sample app handles events: loyalty and shipping on orderplaced
    for topic, endpoint in expected:
        assert endpoint in await subscribers(account, topic)


async def test_it_runs_once_per_process_and_is_idempotent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    account = await provisioned()
    app_worker = worker(account)
    await app_worker.serving()
    # An operator takes one away: the same process does not put it back.
    await app_worker.bus().topics.unsubscribe("orderplaced", "shipping")
    await app_worker.serving()
    assert "shipping" not in await subscribers(account, "orderplaced")
    # A new process (instance) subscribes again, changing nothing that is already there.
    before = await subscribers(account, "orderplaced")
    await worker(account).serving()
    assert await subscribers(account, "orderplaced") == sorted({*before, "shipping"})
    await worker(account).serving()
    assert await subscribers(account, "orderplaced") == sorted({*before, "shipping"})
    assert successes(caplog) == 3


async def test_a_failure_is_logged_never_raised_and_tried_again_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Storage trouble (here: the topics container is missing) does not fail the invocation;
    the state says why, and an invocation after RETRY_SECONDS tries again."""
    account = MemoryStorageAccount()
    clock = ManualClock()
    app_worker = worker(account, clock)
    await app_worker.serving()
    state = app_worker.subscription.state
    assert state.startswith("failed: ")
    assert "does not exist" in state
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith(SUBSCRIBED + "could not subscribe the endpoints")
    assert "`bus subscribe --all`" in warning.getMessage()

    await provision(account, app_worker.resources)
    clock.advance(RETRY_SECONDS / 2)
    await app_worker.serving()  # too soon: not tried, not logged again
    assert app_worker.subscription.state == state
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    clock.advance(RETRY_SECONDS / 2)
    await app_worker.serving()
    assert app_worker.subscription.state == "done"
    assert "shipping" in await subscribers(account, "orderplaced")


async def test_switched_off_nothing_is_subscribed_and_health_says_so() -> None:
    account = await provisioned()
    app_worker = worker(account, BUS_AUTO_SUBSCRIBE="false")
    await app_worker.serving()
    assert app_worker.subscription.state == "off"
    status, body = await app_worker.health()
    report = json.loads(body)
    assert status == 503
    assert report["startup_subscription"] == "off"
    shipping = {
        "topic": "orderplaced",
        "endpoint": "shipping",
        "fix": "bus subscribe orderplaced shipping",
    }
    assert shipping in report["unsubscribed"]


def test_the_setting_is_on_by_default_and_refuses_what_is_not_a_switch() -> None:
    assert build_config(sample_settings()).auto_subscribe is True
    assert build_config(sample_settings(BUS_AUTO_SUBSCRIBE="0")).auto_subscribe is False
    with pytest.raises(ConfigurationError, match="BUS_AUTO_SUBSCRIBE"):
        build_config(sample_settings(BUS_AUTO_SUBSCRIBE="sometimes"))


async def test_health_names_each_unsubscribed_handler_until_subscribed() -> None:
    account = await provisioned()
    app_worker = worker(account)
    status, body = await app_worker.health()
    report = json.loads(body)
    assert status == 503
    assert report["healthy"] is False
    assert report["startup_subscription"] == "pending"
    gaps = {(gap["topic"], gap["endpoint"]) for gap in report["unsubscribed"]}
    assert gaps == set(handled_topics(sample_app))

    await app_worker.bus().topics.subscribe("orderplaced", "shipping")
    report = json.loads((await app_worker.health())[1])
    gaps = {(gap["topic"], gap["endpoint"]) for gap in report["unsubscribed"]}
    assert gaps == set(handled_topics(sample_app)) - {("orderplaced", "shipping")}

    await app_worker.serving()
    status, body = await app_worker.health()
    assert status == 200
    assert json.loads(body)["unsubscribed"] == []


async def test_the_health_function_subscribes_before_it_reports() -> None:
    """Any of the app's functions is a first invocation: the health route's, here."""
    account = await provisioned()
    app_worker = worker(account)
    app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
    app.register_functions(blueprint(app_worker))
    (health,) = [f for f in app.get_functions() if f.get_function_name() == "health"]
    response = await health.get_user_function()(func.HttpRequest("GET", "/api/health", body=b""))
    assert response.status_code == 200
    assert json.loads(response.get_body())["startup_subscription"] == "done"


@pytest.mark.azurite
async def test_concurrent_first_invocations_on_azurite_subscribe_once(
    azurite: AzuriteEndpoints, caplog: pytest.LogCaptureFixture
) -> None:
    """With real storage round trips the first invocations overlap: one subscribes, the
    others wait for it and find it done."""
    caplog.set_level(logging.INFO)
    async with AzureStorageAccount(StorageSettings(azurite.connection_string)) as account:
        app_worker = worker(account)
        await provision(account, app_worker.resources)
        await asyncio.gather(*(app_worker.serving() for _ in range(20)))
        assert successes(caplog) == 1
        assert app_worker.subscription.state == "done"
        assert "shipping" in await app_worker.bus().topics.subscribers("orderplaced")


@pytest.mark.azurite
async def test_storage_refusing_the_identity_is_logged_and_the_invocation_goes_on(
    azurite: AzuriteEndpoints, caplog: pytest.LogCaptureFixture
) -> None:
    """No rights (here: a key the emulator refuses, 403): a warning naming the refusal."""
    refused = azurite.connection_string.replace(DEV_KEY, "d3Jvbmcga2V5")
    async with AzureStorageAccount(StorageSettings(refused)) as account:
        app_worker = worker(account)
        await app_worker.serving()
    assert app_worker.subscription.state.startswith("failed: ")
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "could not subscribe the endpoints" in warning.getMessage()
    assert "403" in warning.getMessage()


@pytest.fixture(scope="module")
def freezable() -> Iterator[FreezableAzurite]:
    yield from started_freezable()  # private: it is frozen


@pytest.mark.azurite
async def test_a_frozen_account_gets_the_first_ingress_request_its_503_within_the_timeout(
    freezable: FreezableAzurite, caplog: pytest.LogCaptureFixture
) -> None:
    """The start-up subscription of a fresh process runs inside the request's timeout, so
    BUS_INGRESS_TIMEOUT still bounds the answer when storage stops answering."""
    ingress_seconds = 3.5
    app_worker = runtime.Worker(
        sample_app,
        sample_settings(
            AzureWebJobsStorage=freezable.connection_string,
            BUS_STORAGE_CONNECT_TIMEOUT="1",
            BUS_STORAGE_READ_TIMEOUT="1",
            BUS_STORAGE_CALL_TIMEOUT="3",
            BUS_INGRESS_TIMEOUT=str(ingress_seconds),
        ),
    )
    await provision(app_worker.account(), app_worker.resources)
    order = {"type": "PlaceOrder", "to": "orders", "body": FROZEN_ORDER}
    try:
        with freezable.frozen():
            started = time.monotonic()
            status, _ = await app_worker.ingress(
                {"Idempotency-Key": "frozen-first"}, json.dumps(order).encode()
            )
            answered_in = time.monotonic() - started
    finally:
        await app_worker.close()
    assert status == 503
    assert answered_in < ingress_seconds + 1.0
    assert app_worker.subscription.state.startswith("failed: ")
    assert any("could not subscribe" in r.getMessage() for r in caplog.records)


@pytest.mark.azurite
async def test_the_subscription_gives_up_when_its_time_is_up(freezable: FreezableAzurite) -> None:
    app_worker = runtime.Worker(
        sample_app, sample_settings(AzureWebJobsStorage=freezable.connection_string)
    )
    await provision(app_worker.account(), app_worker.resources)
    try:
        with freezable.frozen():
            started = time.monotonic()
            await app_worker.serving(within=0.5)
            stopped_after = time.monotonic() - started
    finally:
        await app_worker.close()
    assert stopped_after < 1.5  # not the default call timeout (8 s)
    assert app_worker.subscription.state == "failed: storage did not answer within 0.5 s"


@pytest.mark.parametrize(
    "written",
    [
        b"not json",
        b"[]",
        b'{"topic": "orderplaced"}',
        b'{"subscribers": "shipping"}',
        b'{"subscribers": [1]}',
        b"\xff\xfe",
    ],
)
async def test_a_recipient_list_the_bus_did_not_write_is_reported_not_a_crash(
    written: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    account = await provisioned()
    await account.blob_container(TOPICS).create("orderplaced.json", written)
    app_worker = worker(account)
    await app_worker.serving()  # does not raise
    assert "orderplaced.json is not the bus's JSON" in app_worker.subscription.state
    assert "`bus subscribe --all`" in app_worker.subscription.state
    status, body = await app_worker.health()
    assert status == 503
    (error,) = json.loads(body)["errors"]
    assert error.startswith("topic recipient lists: topic recipient list orderplaced.json")
