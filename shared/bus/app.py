"""Declaring endpoints and their handlers: the user-facing registration API."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from shared.bus.context import HandlerContext
from shared.bus.effects import (
    DEFAULT_CALL_SECONDS,
    IN_PROGRESS_STATUSES,
    KEY_REUSED_STATUSES,
    ServiceDeclaration,
)
from shared.bus.handles import CANCEL_TYPE
from shared.bus.http_routes import DEFAULT_MAX_BODY_BYTES, HttpRoute, RouteHandler
from shared.bus.messages import Event, Message, topics_of, type_names
from shared.bus.reading import check_versions
from shared.bus.retries import RetryPolicy
from shared.bus.routes import ExternalEndpoint, Routes
from shared.bus.saga import SagaSpec
from shared.errors import ConfigurationError
from shared.resources import check_app_name, check_endpoint_name, performer_endpoint

S = TypeVar("S", bound=BaseModel)
M = TypeVar("M", bound=Message)

Mode = Literal["token", "state_based", "entity_outbox", "processed_messages"]
"""How an endpoint deduplicates (design notes section 5; ``docs/modes.md`` compares them):
``token`` claims the incoming token (no time window); ``state_based`` keeps a versioned state
stream and replays duplicates through the deterministic handler; ``entity_outbox`` keeps an
outbox map inside the state entity; ``processed_messages`` inserts one row per processed
message. All share the transport, the handler API and the outgoing side."""
MODES: tuple[Mode, ...] = typing.get_args(Mode)
Store = Literal["table", "postgres", "cosmos", "blob"]
"""Where an endpoint keeps its state, outbox records and audit rows (``docs/postgres.md``):
its Table Storage table, or PostgreSQL (in every mode, the window modes' rows too), committed
in one SQL transaction that a handler's own writes can join. Tokens, signals and recipient
lists stay in Blob and Queue storage either way, so endpoints of both stores talk to each other."""
STORES: tuple[Store, ...] = typing.get_args(Store)
Handler = Callable[[HandlerContext[Any], Any], Awaitable[None] | None]
SAGA_REFUSED: dict[str, str] = {
    "entity_outbox": (
        "its duplicate evidence lives inside the partition's state row, so a message for an "
        "instance that does not exist could only be deduplicated by creating that row, an "
        "instance nobody started; use mode 'token' or 'processed_messages'"
    ),
    "state_based": (
        "it recognises a duplicate by replaying it against the state version it first ran "
        "on, and a message that found no instance ran on none, nor does a completed instance "
        "keep its versions; use mode 'token' or 'processed_messages'"
    ),
}
"""The modes a saga cannot run in, and why (``BusApp.saga``)."""


class NoState(BaseModel):
    """State for endpoints that keep none."""


@dataclass
class Endpoint(Generic[S]):
    """A named message handler group with one queue, one table and one state model."""

    name: str
    state_type: type[S]
    mode: Mode = "token"
    store: Store = "table"
    handlers: dict[str, tuple[type[Message], Handler]] = field(default_factory=dict)
    """Type name -> model and handler, by each type's current name."""
    former_names: dict[str, str] = field(default_factory=dict)
    """A handled type's former name (``Message.former_names``) -> its current name."""
    routes: Routes = field(kw_only=True, repr=False, compare=False)
    """The app's destinations, which every output of this endpoint is checked against."""
    retry: RetryPolicy | None = field(default=None, kw_only=True)
    """What to do when a handler raises (``shared.bus.retries``); None: the host's retries."""
    retry_for: dict[str, RetryPolicy] = field(default_factory=dict, kw_only=True)
    """Policies of single message types (by type name), over ``retry``."""
    sessions: bool = field(default=False, kw_only=True)
    """Whether web requests may send as this endpoint through transactional sessions
    (``Bus.session``, ``docs/sessions.md``): its rows then hold their records, which its
    cleanup finishes and retires."""
    saga: SagaSpec | None = field(default=None, kw_only=True)
    """How it runs as a saga (``BusApp.saga``, ``shared.bus.saga``); None: an ordinary
    endpoint, whose partitions are created by any message."""

    def __post_init__(self) -> None:
        check_endpoint_name(self.name)
        if self.mode not in MODES:
            raise ConfigurationError(
                f"endpoint {self.name}: unknown mode {self.mode!r}; choose one of {list(MODES)}"
            )
        if self.store not in STORES:
            raise ConfigurationError(
                f"endpoint {self.name}: unknown store {self.store!r}; choose one of {list(STORES)}"
            )

    def handles(self, model: type[M]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: ``@endpoint.handles(PlaceOrder)`` on ``def f(ctx, message)`` (sync or
        async). Handling an Event subscribes the endpoint to the event's topic."""

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            name = model.type_name()
            if CANCEL_TYPE in type_names(model):
                raise ConfigurationError(
                    f"endpoint {self.name}: {CANCEL_TYPE} is the bus's own cancel command; "
                    "name the type otherwise"
                )
            if name in self.handlers:
                raise ValueError(f"endpoint {self.name} already handles {name}")
            taken = [n for n in type_names(model) if n in self.accepted]
            if taken:
                raise ConfigurationError(
                    f"endpoint {self.name}: {name} would be received under {taken}, which it "
                    f"already takes as {[self.current_name(n) for n in taken]}: a type name or "
                    "former name names one handled type only"
                )
            self.handlers[name] = (model, function)
            self.former_names.update(dict.fromkeys(model.former_names, name))
            return function

        return register

    def not_found(self, model: type[M]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator on a saga: ``@checkout.not_found(PaymentReceived)`` on ``def f(ctx,
        message)`` runs for a ``PaymentReceived`` that finds no instance (never started, or
        completed). It may send and reply; it has no state (``ctx.state`` is a fresh default
        that is not saved) and cannot complete. Without one, such a message is acknowledged
        with outcome ``saga_not_found``."""
        saga = self.saga
        if saga is None:
            raise ConfigurationError(
                f"endpoint {self.name} is not a saga: only a saga's messages can find no instance"
            )

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            name = model.type_name()
            if name in saga.not_found:
                raise ConfigurationError(
                    f"saga {self.name} already has a not-found handler for {name}"
                )
            saga.not_found[name] = function
            return function

        return register

    def current_name(self, type_name: str) -> str:
        """The handled type's current name for ``type_name`` (itself, or a former name's)."""
        return self.former_names.get(type_name, type_name)

    def retry_policy(self, type_name: str | None) -> RetryPolicy | None:
        """The policy for a message of ``type_name`` (None: not decoded yet)."""
        if type_name is not None and self.current_name(type_name) in self.retry_for:
            return self.retry_for[self.current_name(type_name)]
        return self.retry

    def handler_for(self, type_name: str) -> tuple[type[Message], Handler] | None:
        """The model and handler of a message received as ``type_name``, under its current
        name or a former one."""
        return self.handlers.get(self.current_name(type_name))

    @property
    def accepted(self) -> dict[str, type[Message]]:
        """Every type name this endpoint receives, current and former, -> its model."""
        return {name: model for model, _ in self.handlers.values() for name in type_names(model)}

    @property
    def topics(self) -> list[str]:
        """Topics this endpoint subscribes to: those of the events it handles, under their
        current and former names (so that publishers of an older version reach it)."""
        events = [model for model, _ in self.handlers.values() if issubclass(model, Event)]
        return sorted({topic for model in events for topic in topics_of(model)})


def _check_saga(endpoint: Endpoint[Any], saga: SagaSpec) -> None:
    """A saga's starting types and not-found handlers must be of types it handles."""
    for what, names in (("started_by", saga.started_by), ("not_found", set(saga.not_found))):
        unhandled = sorted(set(names) - set(endpoint.handlers))
        if unhandled:
            raise ConfigurationError(
                f"saga {endpoint.name}: {what} names {unhandled}, which it does not handle "
                f"(it handles {sorted(endpoint.handlers)})"
            )


async def call_handler(handler: Handler, context: HandlerContext[Any], message: Message) -> None:
    result = handler(context, message)
    if inspect.isawaitable(result):
        await result


class BusApp:
    """All endpoints of one application, and the endpoints of other apps it sends to."""

    def __init__(self, *, name: str | None = None) -> None:
        self.name = check_app_name(name)
        """The app's name among the apps of a system (None: the only app of its account);
        the app setting ``BUS_APP_NAME`` wins over it (``shared.resources.app_name_of``)."""
        self.endpoints: dict[str, Endpoint[Any]] = {}
        self.services: dict[str, ServiceDeclaration] = {}
        """The external services handlers may request effects of (``docs/effects.md``)."""
        self.routes = Routes(self.endpoints, self.services)
        self.http_routes: dict[str, HttpRoute] = {}
        """The app's own web routes by function name (``route``)."""

    def endpoint(
        self,
        name: str,
        state: type[S] = NoState,  # type: ignore[assignment]
        mode: Mode = "token",
        store: Store = "table",
        *,
        retry: RetryPolicy | None = None,
        retry_for: Mapping[type[Message], RetryPolicy] | None = None,
        sessions: bool = False,
    ) -> Endpoint[S]:
        """Declare an endpoint. ``retry`` is its policy for handler errors and ``retry_for``
        the policies of single message types (``shared.bus.retries``); without either, a
        failing message goes back to the host (host.json's visibilityTimeout and
        maxDequeueCount). ``sessions``: web requests may send as this endpoint, atomically
        with their own writes to its store (``Bus.session``)."""
        if name in self.endpoints or name in self.routes.external:
            raise ValueError(f"endpoint {name} is declared twice")
        endpoint: Endpoint[S] = Endpoint(
            name,
            state,
            mode,
            store,
            routes=self.routes,
            retry=retry,
            retry_for={m.type_name(): p for m, p in (retry_for or {}).items()},
            sessions=sessions,
        )
        self.endpoints[name] = endpoint
        return endpoint

    def saga(
        self,
        name: str,
        state: type[S],
        *,
        started_by: Collection[type[Message]],
        correlate: Mapping[type[Message], str] | None = None,
        mode: Mode = "token",
        store: Store = "table",
        retry: RetryPolicy | None = None,
        retry_for: Mapping[type[Message], RetryPolicy] | None = None,
    ) -> Endpoint[S]:
        """Declare a saga (``docs/sagas.md``): an endpoint whose partitions are instances of a
        long-running process with state ``state``. A message reaches the instance its
        correlation property names (its type's ``partition_by``; ``correlate`` states it per
        type, and is checked against it), or, for a reply, the instance that asked. Only the
        ``started_by`` types create an instance; handlers end one with ``ctx.complete()``.
        Handlers are declared with ``handles`` as for any endpoint, and not-found handlers
        with ``not_found``. Sagas run in token and processed_messages mode, on either store;
        the other modes are refused (``SAGA_REFUSED`` says why)."""
        starters = list(started_by)
        if not starters:
            raise ConfigurationError(f"saga {name}: started_by names no message type")
        if mode in SAGA_REFUSED:
            raise ConfigurationError(
                f"saga {name}: mode {mode!r} cannot run a saga: {SAGA_REFUSED[mode]}"
            )
        for model, attribute in (correlate or {}).items():
            if model.partition_by != attribute:
                raise ConfigurationError(
                    f"saga {name}: {model.type_name()} is correlated by {attribute!r}, but its "
                    f"partition_by is {model.partition_by!r}: set {model.type_name()}."
                    f"partition_by = {attribute!r}, which is what its senders route it by"
                )
        endpoint = self.endpoint(name, state, mode, store, retry=retry, retry_for=retry_for)
        endpoint.saga = SagaSpec(frozenset(m.type_name() for m in starters))
        return endpoint

    def external_endpoint(
        self, name: str, *, accepts: Collection[type[Message]]
    ) -> ExternalEndpoint:
        """Declare an endpoint of another app (sharing this storage account) that this app's
        handlers and ingress may send to, or that may subscribe to this app's events: its
        queue name and the message types it accepts. Any other destination is refused
        before the commit (``shared.bus.routes``)."""
        return self.routes.declare_external(name, accepts)

    def service(
        self,
        name: str,
        *,
        operations: Mapping[str, str],
        at_most_once: bool = False,
        timeout_seconds: float = DEFAULT_CALL_SECONDS,
        idempotency_header: str = "Idempotency-Key",
        in_progress_statuses: Collection[int] = IN_PROGRESS_STATUSES,
        key_reused_statuses: Collection[int] = KEY_REUSED_STATUSES,
    ) -> ServiceDeclaration:
        """Declare an external service that handlers may call through
        ``ctx.request_effect`` (``docs/effects.md``): its operations (name -> path), whether
        it honours an idempotency key, its call timeout, and which of its 4xx statuses mean
        "a call under this key is still in progress" (retried with the same key) and "this
        key was used with another body" (parked). Its base address and credential are app
        settings, read once at start-up."""
        if name in self.services:
            raise ValueError(f"service {name} is declared twice")
        declared = ServiceDeclaration(
            name,
            operations,
            at_most_once,
            timeout_seconds,
            idempotency_header,
            in_progress_statuses,
            key_reused_statuses,
        )
        self.services[name] = declared
        return declared

    def route(
        self,
        path: str,
        *,
        methods: Collection[str] = ("POST",),
        name: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> Callable[[RouteHandler], RouteHandler]:
        """Decorator: ``@app.route("orders", methods=["POST"])`` on ``async def f(request,
        bus)`` declares the web route ``/api/orders`` (``shared.bus.http_routes``), bound as
        an HTTP function named ``name`` (default: the handler's name) that takes a function
        key. A body over ``max_body_bytes`` is refused (413) before the handler runs."""

        def register(handler: RouteHandler) -> RouteHandler:
            function = name or str(getattr(handler, "__name__", ""))
            route = HttpRoute.declared(function, path, methods, handler, max_body_bytes)
            if route.name in self.http_routes:
                raise ConfigurationError(f"route function {route.name} is declared twice")
            # The host matches paths whatever their case.
            same = [
                r.name
                for r in self.http_routes.values()
                if r.path.lower() == route.path.lower() and set(r.methods) & set(route.methods)
            ]
            if same:
                raise ConfigurationError(f"route {route.path!r} is declared twice ({same[0]})")
            self.http_routes[route.name] = route
            return handler

        return register

    def running_endpoints(self, app_name: str | None = None) -> list[str]:
        """Every endpoint the app runs: its own and, when it declares services, the bus's
        performer, which the runtime adds to the app when it builds a worker
        (``shared.effects.wiring``), named after ``app_name`` (default: the app's declared
        name). For tools that read the app without building one, such as the audit, whose
        rows include the performer's."""
        names = list(self.endpoints)
        performer = performer_endpoint(app_name or self.name)
        if self.services and performer not in self.endpoints:
            names.append(performer)
        return names

    def check(self) -> None:
        """What can only be judged once every handler is registered (the app loader calls it
        at start-up): a retry policy for a message type its endpoint does not handle is a
        mistake that would otherwise go unnoticed, and so is a type version that cannot read
        its older bodies (``shared.bus.reading.check_versions``)."""
        for endpoint in self.endpoints.values():
            for model, _ in endpoint.handlers.values():
                check_versions(model)
            if endpoint.saga is not None:
                _check_saga(endpoint, endpoint.saga)
            unhandled = sorted(set(endpoint.retry_for) - set(endpoint.handlers))
            if unhandled:
                raise ConfigurationError(
                    f"endpoint {endpoint.name}: retry_for names {unhandled}, which it does not "
                    f"handle (it handles {sorted(endpoint.handlers)})"
                )

    def get(self, name: str) -> Endpoint[Any]:
        try:
            return self.endpoints[name]
        except KeyError:
            raise KeyError(f"no endpoint named {name!r}; known: {sorted(self.endpoints)}") from None
