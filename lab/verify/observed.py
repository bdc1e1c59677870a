"""The user's app as ``bus verify`` runs it: a copy whose handlers are wrapped from the
outside to record what each run of a handler was given and what it did, with the bus's
performer added when the app declares services. The user's ``BusApp`` is not changed.

Determinism: a state-based endpoint replays a duplicate through its handler, from the state
the message was first processed from, and must get the same outputs (``docs/modes.md``). The
recorder keys every run of a handler by (endpoint, message id, state before) and keeps what
it produced (the state after and the outputs): a second run with the same key and another
result names a nondeterministic handler, such as one reading the system clock or Python's
``random`` module instead of ``ctx.now()`` and ``ctx.random()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from shared.bus import BusApp, HandlerContext, Message
from shared.bus.app import Endpoint, Handler, call_handler
from shared.bus.effects import PERFORMER_ENDPOINT
from shared.effects.addresses import EffectSettings
from shared.effects.markers import EffectMarkers
from shared.effects.performer import add_performer
from shared.effects.provider import Provider

CALL_TIMEOUT = 60.0
"""Seconds a simulated service call may take: in-memory calls never wait."""

Key = tuple[str, str, str, str]
"""(endpoint, message id, the state before as JSON, the processing time): a state-based
endpoint replays a duplicate with the time it first recorded, so only another time may
legitimately give another result."""


@dataclass(frozen=True)
class Nondeterminism:
    endpoint: str
    handler: str
    message_type: str
    message_id: str
    judged: bool
    """Its endpoint is state-based, where replays rely on the handler being deterministic."""

    def describe(self) -> str:
        return (
            f"{self.endpoint}: handler {self.handler} of {self.message_type} gave different "
            f"outputs for message {self.message_id} from the same state (does it read the "
            "system clock or the random module? use ctx.now() and ctx.random())"
        )


@dataclass
class Recorder:
    """What every run of a wrapped handler produced, across the runs that share it."""

    produced: dict[Key, str] = field(default_factory=dict)
    found: dict[tuple[str, str], Nondeterminism] = field(default_factory=dict)
    """(endpoint, handler) -> the first nondeterminism seen."""

    def copy(self) -> Recorder:
        return Recorder(dict(self.produced), dict(self.found))

    def note(self, key: Key, result: str, handler: str, message: Message, judged: bool) -> None:
        first = self.produced.setdefault(key, result)
        endpoint, message_id, _, _ = key
        if first != result and (endpoint, handler) not in self.found:
            self.found[(endpoint, handler)] = Nondeterminism(
                endpoint, handler, message.type_name(), message_id, judged
            )

    def wrap(self, endpoint: Endpoint[Any], handler: Handler) -> Handler:
        name = getattr(handler, "__qualname__", repr(handler))

        async def observed(ctx: HandlerContext[Any], message: Message) -> None:
            before = ctx.state.model_dump_json()
            await call_handler(handler, ctx, message)
            after = ctx.state.model_dump_json()
            result = f"{after}\n{[repr(o) for o in ctx.outputs]}"
            key = (endpoint.name, ctx.message_id, before, ctx.now().isoformat())
            self.note(key, result, name, message, judged=endpoint.mode == "state_based")

        return observed


def observed_app(
    app: BusApp,
    recorder: Recorder,
    providers: Mapping[str, Provider],
    markers: EffectMarkers | None,
) -> BusApp:
    """A copy of ``app`` whose handlers ``recorder`` wraps, with the bus's performer calling
    ``providers`` when the app declares services (as the runtime adds it)."""
    copy = BusApp()
    for name, endpoint in app.endpoints.items():
        if name != PERFORMER_ENDPOINT:  # a performer of the app's own would call real services
            copy.endpoints[name] = _observed_endpoint(endpoint, copy, recorder)
    copy.services.update(app.services)
    copy.routes.external.update(app.routes.external)
    if copy.services:
        # The runtime's retries (BUS_EFFECT_RETRIES by default): a provider's "in progress"
        # is retried after a delay, by when the call it is still working on has landed.
        retry = EffectSettings().retry_policy()
        add_performer(copy, providers, call_timeout=CALL_TIMEOUT, retry=retry, markers=markers)
    return copy


def _observed_endpoint(endpoint: Endpoint[Any], copy: BusApp, recorder: Recorder) -> Endpoint[Any]:
    handlers = {
        type_name: (model, recorder.wrap(endpoint, handler))
        for type_name, (model, handler) in endpoint.handlers.items()
    }
    return replace(
        endpoint,
        handlers=handlers,
        former_names=dict(endpoint.former_names),
        routes=copy.routes,
        retry_for=dict(endpoint.retry_for),
    )
