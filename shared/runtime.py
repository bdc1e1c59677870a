"""The objects one worker process keeps for the configured app, built once on first use.

``function_app.py`` registers the bindings generated from ``worker()`` (``shared.bindings``);
each calls one method here. The CLI and the demo build a ``Worker`` on their own account.
Where the rest lives: settings in ``shared.settings``, the configuration built from them once
at start-up in ``shared.config`` (``AppConfig``), the app in ``shared.app_loader``, cleanup in
``shared.cleanup.now``, the storage health check in ``shared.health``. A local run wraps the
worker's stores and watches its outcomes through ``Wrappers`` (the local host's faults and
outcome log, ``lab.host.chaos``); the deployed app wraps nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared import http_cancel, http_ingress, observability, web_serving
from shared.app_loader import configured_app
from shared.bus import Bus, BusApp, BusConfig, Outcome
from shared.bus.pipeline import queue_text
from shared.bus.state.rows import EndpointRows
from shared.bus.state.stores import PostgresDatabase, SqlDatabase, endpoints_rows
from shared.bus.topics import RecipientLists
from shared.cleanup.now import cleanup_pass
from shared.config import AppConfig, build_config, default_bus_config
from shared.effects.wiring import wire_performer
from shared.errors import ConfigurationError
from shared.health import check, check_subscriptions
from shared.resources import Resources, app_name_of, resources_for
from shared.settings import Settings, resolve_settings
from shared.startup_subscription import StartupSubscription
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from shared.web import WebRequest, WebResponse

if TYPE_CHECKING:
    from shared.stores.cosmos.database import CosmosDatabase


@dataclass(frozen=True)
class Wrappers:
    """What a caller wraps around a worker's stores, and who hears of its outcomes: nothing
    by default and in Azure; the local host's faults and outcome log (``lab.host.chaos``)
    in a local run."""

    account: Callable[[StorageAccount], StorageAccount] | None = None
    """Wraps each storage account once, for every use: the bus, health and cleanup (the
    state account too when it is another account than the messaging one)."""
    bus: (
        Callable[[StorageAccount, SqlDatabase | None], tuple[StorageAccount, SqlDatabase | None]]
        | None
    ) = None
    """Wraps the account and the database the bus works on (queue-triggered and HTTP
    invocations), not those of health and cleanup; a state account of its own is wrapped
    with no database."""
    outcome: Callable[[str, Outcome], None] | None = None
    """Called with the endpoint and the outcome of every receive."""


_wrappers = Wrappers()


def bus_config() -> BusConfig:
    """Defaults, with the shared containers' and tables' names (``shared.resources``), for
    tools that need only those names; a worker's own is ``AppConfig.bus``."""
    return default_bus_config()


class Worker:
    """One app on its storage accounts: the messaging account (opened from the settings
    unless given), the state account of its endpoints' rows (the same object unless
    ``BUS_STATE_STORAGE_SETTING`` names a connection of its own, opened from the settings
    unless given), and one bus, for queue-triggered processing and HTTP ingress alike.

    ``wrappers`` wrap its stores and hear of its outcomes (``Wrappers``). A crash a wrapper
    injects between an ingress token's create and its ingress record leaves a token no record
    lists, which the cleanup's abandoned-token task removes; the client's retry with the same
    key is answered exactly once either way."""

    def __init__(
        self,
        app: BusApp,
        config: AppConfig | Settings,
        account: StorageAccount | None = None,
        *,
        state_account: StorageAccount | None = None,
        wrappers: Wrappers | None = None,
    ) -> None:
        """``config``: the app's configuration, built for this app's name, or the settings to
        build it from (with the host.json of the current folder). ``state_account``: the state
        account, when the caller opened it (and closes it); ignored when the settings name no
        state account of its own."""
        self.app = app
        self.app_config = _configured_for(app, config)
        self.settings = self.app_config.settings
        self.config = self.app_config.bus
        self.http = wire_performer(app, self.app_config, self.state_account)
        """The session of the performer's calls to the app's services (None: it declares
        none); added before the resources, so its queue and table are provisioned too."""
        self.resources: Resources = resources_for(
            app.endpoints,
            self.app_config.app_name,
            [e.name for e in app.endpoints.values() if e.store == "blob"],
            [e.name for e in app.endpoints.values() if e.store == "cosmos"],
        )
        self.wrappers = wrappers or Wrappers()
        self._given_account = account
        self._account: StorageAccount | None = None
        self._given_state = state_account
        self._state: StorageAccount | None = None
        self._bus: Bus | None = None
        self._sql: PostgresDatabase | None = None
        self._cosmos: CosmosDatabase | None = None
        self._check_cosmos()
        self.subscription = StartupSubscription(self.app_config.auto_subscribe, self.config.clock)
        """The app's own functions subscribe its endpoints on their first invocation
        (``serving``); the CLI and the tools never do."""

    @classmethod
    def from_settings(
        cls,
        settings: Settings | None = None,
        *,
        root: Path | None = None,
        wrappers: Wrappers | None = None,
    ) -> Worker:
        """The configured app (``BUS_APP``) on the configured storage; host.json from ``root``
        (default: the current folder)."""
        settings = settings or resolve_settings()
        app = configured_app(settings)
        config = build_config(settings, root=root, app_name=app.name)
        return cls(app, config, wrappers=wrappers)

    @classmethod
    def for_account(cls, account: StorageAccount, settings: Settings | None = None) -> Worker:
        """The configured app on an account the caller opened (and closes)."""
        settings = settings or resolve_settings()
        app = configured_app(settings)
        return cls(app, build_config(settings, app_name=app.name), account)

    def account(self) -> StorageAccount:
        """The messaging account: queues, tokens, payloads, topics, parked messages, ingress
        records and the app-wide tables (``shared.resources``)."""
        if self._account is None:
            raw = self._given_account or AzureStorageAccount(self.app_config.require_storage())
            self._account = self._wrapped(raw)
        return self._account

    @property
    def separate_state(self) -> bool:
        """Whether the endpoints' rows are in an account of their own."""
        return self.settings.separate_state

    def state_account(self) -> StorageAccount:
        """The state account: every table endpoint's rows. The messaging account itself when
        the settings name no state account of its own, so that a single app makes the same
        requests as before."""
        if not self.separate_state:
            return self.account()
        if self._state is None:
            raw = self._given_state or AzureStorageAccount(self.app_config.require_state_storage())
            self._state = self._wrapped(raw)
        return self._state

    def _wrapped(self, raw: StorageAccount) -> StorageAccount:
        wrap = self.wrappers.account
        return raw if wrap is None else wrap(raw)

    def sql(self) -> PostgresDatabase | None:
        """The database of the app's ``store="postgres"`` endpoints (None if it has none),
        from ``BUS_POSTGRES_URL`` and its per-endpoint variants (``shared.bus.state``)."""
        if self._sql is None and any(e.store == "postgres" for e in self.app.endpoints.values()):
            self._sql = PostgresDatabase(self.app_config.postgres)
        return self._sql

    def cosmos_endpoints(self) -> list[str]:
        """The app's endpoints that keep their rows in Cosmos DB (``store="cosmos"``)."""
        return [e.name for e in self.app.endpoints.values() if e.store == "cosmos"]

    def _check_cosmos(self) -> None:
        """Refuse at start-up an app with cosmos endpoints and no account to keep them in."""
        endpoints = self.cosmos_endpoints()
        if endpoints and self.app_config.cosmos.endpoint is None:
            raise ConfigurationError(
                f"endpoint(s) {', '.join(endpoints)} keep their state in Cosmos DB "
                '(store="cosmos") but no account is configured: set BUS_COSMOS_ENDPOINT '
                "(and BUS_COSMOS_KEY, or give the app's identity a Cosmos DB data role)"
            )

    def cosmos(self) -> CosmosDatabase | None:
        """The Cosmos DB database of the app's ``store="cosmos"`` endpoints (None if it has
        none), from ``BUS_COSMOS_*``, opened on first use."""
        if self._cosmos is None and self.cosmos_endpoints():
            # Imported here: an app without cosmos endpoints never loads the SDK.
            from shared.stores.cosmos.database import CosmosDatabase

            self._cosmos = CosmosDatabase.from_settings(
                self.app_config.cosmos, self.app_config.timeouts
            )
        return self._cosmos

    def sql_endpoints(self) -> list[str]:
        """The app's endpoints that keep their rows in PostgreSQL (``store="postgres"``)."""
        return [e.name for e in self.app.endpoints.values() if e.store == "postgres"]

    def endpoint_rows(self) -> dict[str, EndpointRows]:
        """Every endpoint's rows, by name, in the store it declares (its table in the state
        account, or the database of ``sql``): what the cleanup is given. On the worker's
        accounts and database, not the bus's: ``Wrappers.bus`` does not reach the cleanup."""
        return endpoints_rows(
            self.app.endpoints.values(), self.state_account(), self.sql(), self.cosmos()
        )

    def bus(self) -> Bus:
        """The bus of queue-triggered processing and HTTP ingress."""
        if self._bus is None:
            account: StorageAccount = self.account()
            sql: SqlDatabase | None = self.sql()
            state: StorageAccount | None = None
            if self.wrappers.bus is not None:
                account, sql = self.wrappers.bus(account, sql)
            if self.separate_state:
                state = self.state_account()
                if self.wrappers.bus is not None:
                    state, _ = self.wrappers.bus(state, None)
            self._bus = Bus(
                self.app, account, self.config, sql=sql, state=state, cosmos=self.cosmos()
            )
        return self._bus

    async def serving(self, within: float | None = None) -> None:
        """What each of the app's functions does before its work: the start-up subscription
        (``shared.startup_subscription``), once per process, never failing the invocation,
        given up after ``within`` seconds (default: the ingress timeout, the longest a
        caller is meant to wait)."""
        seconds = self.app_config.timeouts.ingress if within is None else within
        await self.subscription.ensure(self.bus(), seconds)

    def recipient_lists(self) -> RecipientLists:
        """The topics' recipient lists read afresh (no cache), on the worker's account: what
        health and ``bus status`` check the subscriptions against."""
        container = self.account().blob_container(self.config.topics_container)
        return RecipientLists(container, self.config.clock, cache_seconds=0)

    async def receive(
        self,
        endpoint: str,
        body: bytes,
        dequeue_count: int,
        enqueued_at: datetime | None = None,
    ) -> Outcome:
        """What every queue-triggered function does with its message. The host has already
        base64-decoded the body; a body that is not UTF-8 is parked whole (``queue_text``).
        ``enqueued_at`` is the message's insertion time, for a poison reason."""
        outcome = await self.bus().receive(
            endpoint, queue_text(body), dequeue_count, enqueued_at=enqueued_at
        )
        if self.wrappers.outcome is not None:
            self.wrappers.outcome(endpoint, outcome)
        return outcome

    async def ingress(self, headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        """HTTP status and JSON body for ``POST /api/messages`` (see ``shared.http_ingress``).
        The start-up subscription (``serving``) runs first, within the same ingress timeout:
        a storage that stops answering still gets the client its 503 in that time."""
        budget = self.app_config.timeouts.ingress
        started = time.monotonic()
        await self.serving(within=budget)
        answer = await http_ingress.handle(
            self.bus(),
            headers,
            body,
            ingress_seconds=budget,
            spent_seconds=time.monotonic() - started,
            platform=self.app_config.platform,
        )
        return answer.status, answer.json()

    async def cancel(self, headers: Mapping[str, str]) -> tuple[int, str]:
        """HTTP status and JSON body for ``POST /api/messages/cancel``
        (``shared.http_cancel``), within the ingress timeout as ``ingress`` is."""
        budget = self.app_config.timeouts.ingress
        started = time.monotonic()
        await self.serving(within=budget)
        answer = await http_cancel.handle(
            self.bus(),
            headers,
            ingress_seconds=budget,
            spent_seconds=time.monotonic() - started,
            platform=self.app_config.platform,
        )
        return answer.status, answer.json()

    async def route(self, name: str, request: WebRequest) -> WebResponse:
        """The answer of the app's web route ``name`` (``shared.web_serving``), within the
        ingress timeout as ``ingress`` is, the start-up subscription included; the request
        learns whether the platform's principal headers are to be believed."""
        budget = self.app_config.timeouts.ingress
        started = time.monotonic()
        await self.serving(within=budget)
        return await web_serving.serve(
            self.bus(),
            self.app.http_routes[name],
            replace(request, platform=self.app_config.platform),
            seconds=budget,
            spent_seconds=time.monotonic() - started,
        )

    async def health(self) -> tuple[int, str]:
        """Status and JSON body for the health endpoint (``shared.health.check``): 200 or 503."""
        report = await check(self.account(), self.resources, state=self._state_if_separate())
        await check_subscriptions(report, self.app, self.recipient_lists())
        report.startup_subscription = self.subscription.state
        return (200 if report.healthy else 503), json.dumps(report.as_dict())

    async def cleanup(
        self,
        *,
        grace_seconds: float | None = None,
        progress: Callable[[str], None] | None = None,
        wait: bool = False,
    ) -> dict[str, Any]:
        """One cleanup pass over every endpoint (the timer function and ``bus cleanup``);
        ``wait``: take tasks leased by another live instance once their lease ends."""
        return await cleanup_pass(
            self.account(),
            self.app,
            self.config,
            self.app_config.cleanup,
            grace_seconds=grace_seconds,
            rows=self.endpoint_rows(),
            progress=progress,
            wait=wait,
        )

    def _state_if_separate(self) -> StorageAccount | None:
        return self.state_account() if self.separate_state else None

    async def close(self) -> None:
        """Release the connections this worker opened; it reopens them on next use."""
        account, self._account, self._bus = self._account, None, None
        state, self._state = self._state, None
        if state is not None and self._given_state is None:
            await state.close()
        sql, self._sql = self._sql, None
        if sql is not None:
            await sql.close()
        cosmos, self._cosmos = self._cosmos, None
        if cosmos is not None:
            await cosmos.close()
        if self.http is not None:
            await self.http.close()
        if account is not None and self._given_account is None:
            await account.close()


def _configured_for(app: BusApp, config: AppConfig | Settings) -> AppConfig:
    """``config``, or the configuration built from these settings, for ``app``: one built
    for another name (without the app's ``BusApp.name``, say) would put this app's records
    in another app's tables."""
    if not isinstance(config, AppConfig):
        return build_config(config, app_name=app.name)
    expected = app_name_of(config.settings.values, app.name)
    if config.app_name != expected:
        raise ConfigurationError(
            f"the configuration was built for app name {config.app_name!r}, the app is named "
            f"{expected!r}: build it with build_config(..., app_name=app.name)"
        )
    return config


_worker: Worker | None = None


def worker(root: Path | None = None) -> Worker:
    """This process's worker, built on first use from the resolved settings and the host.json
    in ``root`` (the app's folder; default the current folder), its storage clients opened
    then too: after this nothing reads the environment. Telemetry is set up first
    (``shared.observability``)."""
    global _worker
    if _worker is None:
        observability.configure()  # before any span: OTEL_* and Application Insights settings
        built = Worker.from_settings(root=root, wrappers=_wrappers)
        if built.app_config.storage is not None:
            built.account()  # the clients, with their options, now rather than on a message
            built.state_account()
        _worker = built
    return _worker


async def close() -> None:
    """Release the worker's connections (the local host calls this when it stops)."""
    if _worker is not None:
        await _worker.close()


def wrap(wrappers: Wrappers) -> None:
    """Have this process's worker built with ``wrappers`` (the local host's faults and
    outcome log); only before its first use."""
    global _wrappers
    if _worker is not None:
        raise ConfigurationError("the worker is already built: wrap its stores before")
    _wrappers = wrappers
