"""The application the simulator drives: small, with every handler recording what it applied.

Shapes (``Shape``):
- ``single``: ``first`` handles Start and sends one Step to ``second`` (one outgoing message);
- ``chain``: first -> second -> third, one Step each (a chain of three endpoints);
- ``publish``: first publishes Happened to ``second``, ``third`` and ``fourth``;
- ``mixed``: first sends a Step to second (which forwards to third) and publishes Happened
  to third and fourth;
- ``shared``: first publishes Announced, an event whose envelope is longer than a signal
  carries, to ``second`` and ``third``: its body is stored once, as a shared payload
  (``shared.bus.payloads``), and both tokens refer to it.
- ``effect``: first handles Start by requesting a charge from the service ``payments``
  (``docs/effects.md``); the bus's performer endpoint calls the provider after the commit,
  and first handles the answer, Charged. The entry of Start lists the effect's key. With
  ``at_most_once`` the service honours no key and is declared so: the performer marks each
  effect before its one call, and the answer's entry (``<name>>answered``) records the
  outcome, which faults may make ``uncertain``.

Each handler appends one ``Applied`` entry (message id, its logical name, source, causation, a
digest of what it received) to its partition's state. The invariants read these entries back:
a repeated name is a duplicated processing, an entry whose cause was never applied is a ghost,
a missing entry is a lost message, a digest that differs from the reference run is an
inconsistent output, an entry processed before its message's due time is an early delivery.

Options: ``delay`` makes the first endpoint's Step a delayed message (seconds); ``failures``
makes the second endpoint's Step handler fail that many times per message (a flaky
dependency, outside the state), under the retry policy ``retry`` of that endpoint;
``oversized`` makes its next runs (after those failures) grow the partition's state past a
table entity, a failure no retry mends: the message is parked at once, and the world
replays it once quiet (``SimConfig.oversized``). ``version`` builds the app an old instance
runs in the rolling phase (``SimConfig.rolling``): its second endpoint does not handle Step.

The logical name travels in every message body: a client's Start carries its idempotency key
(``request``), and each output carries its cause's name and the hop (``path``). Message ids
are not enough to name a message across runs: a client send takes a fresh incoming id in
every round, so the ids a run produces depend on how its client sends interleaved, while the
names do not. Two client sends of one key that both get through are two ids with one name:
a duplicate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict

from lab.sim.invocation import handler_ran
from shared.bus import BusApp, Command, Event, HandlerContext, RetryPolicy
from shared.bus.app import Endpoint, Mode, NoState
from shared.bus.effects import (
    PERFORMER_ENDPOINT,
    EffectAnswered,
    EffectRequest,
    ServiceDeclaration,
)
from shared.effects.markers import EffectMarkers
from shared.effects.performer import add_performer
from shared.effects.provider import Provider, outcome_of

Shape = Literal["single", "chain", "publish", "mixed", "shared", "effect"]
Version = Literal["new", "old", "old-misreading"]
"""The version of the app an instance runs: ``new``, or an ``old`` one whose second endpoint
does not know Step yet (a type the new version added: it gives such a message back), or one
that reads it anyway with an old model of it (``old-misreading``, a known-bad variant)."""
SHAPES: tuple[Shape, ...] = ("single", "chain", "publish", "mixed")
"""The shapes random search draws from (``shared`` is explored by its own phase: adding it
here would change what every documented random seed replays)."""
ENDPOINTS = ("first", "second", "third", "fourth")


class Start(Command):
    partition_by = "key"
    key: str
    request: str
    """The idempotency key the client sent it with: its logical name."""


class Step(Command):
    partition_by = "key"
    key: str
    hop: int
    path: str
    """Its logical name: the cause's name and where it goes."""


class OldStep(Command):
    """Step as an old version misreads it: the type's name, without the newer shape (no
    ``path``, and what it does not know dropped)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    partition_by = "key"
    key: str
    hop: int

    @classmethod
    def type_name(cls) -> str:
        return "Step"


class Happened(Event):
    partition_by = "key"
    key: str
    path: str


class Announced(Event):
    """An event large enough that its subscribers' tokens share one payload."""

    partition_by = "key"
    key: str
    path: str
    text: str


ANNOUNCEMENT = "a" * 9000
"""Makes Announced's envelope longer than ``MAX_INLINE_ENVELOPE_CHARS`` (8,192)."""


class Applied(BaseModel):
    id: str
    name: str
    """The logical name (the same in every run, whatever ids its client sends drew)."""
    source: str
    causation: str | None
    digest: str
    early: bool = False
    """Processed before its due time (NoEarlyDelivery)."""
    misread: bool = False
    """Processed by an old version that cannot read it (NoMisreadMessages)."""
    effects: list[str] = []
    """The keys of the effects its handler requested (EffectsAppliedOnce)."""
    outcome: str | None = None
    """An at-most-once effect's answer: its outcome (EffectsAppliedAtMostOnce)."""


class Journal(BaseModel):
    """What one partition of one endpoint applied, in order."""

    applied: list[Applied] = []
    ballast: str = ""
    """Filled only by a run that must fail on the state's size (``build_app(oversized=)``):
    such a run never commits, so every stored journal has none."""


BALLAST = "b" * 600_000
"""1,200,000 bytes as Table Storage counts a text: past the 1 MiB an entity holds (and the
entity outbox's ``entity_max_bytes``), however its properties spread it."""


ANSWER_VARIES = ("outcome", "status", "body")
"""What an at-most-once effect's answer may differ in from the fault-free run's: a fault
may make it ``uncertain``, which the invariant on that effect judges instead."""


def digest(ctx: HandlerContext[Journal], *, varies: tuple[str, ...] = ()) -> str:
    """What the handler received, reduced to a short fingerprint (ConsistentOutput), less
    the body fields that ``varies`` names: those a fault may legitimately change."""
    envelope = ctx.envelope
    body = {k: v for k, v in (envelope.body or {}).items() if k not in varies}
    # Not the causation id: a client send's ids differ from run to run (the body's logical
    # name says what caused the message; NoGhostMessages checks the causation id itself).
    seen = json.dumps([envelope.type, envelope.source, body], sort_keys=True)
    return hashlib.sha256(seen.encode()).hexdigest()[:16]


def record(
    ctx: HandlerContext[Journal],
    name: str,
    *,
    misread: bool = False,
    effects: tuple[str, ...] = (),
    outcome: str | None = None,
) -> None:
    due = ctx.envelope.deliver_at
    ctx.state.applied.append(
        Applied(
            id=ctx.message_id,
            name=name,
            source=ctx.envelope.source,
            causation=ctx.envelope.causation_id,
            digest=digest(ctx, varies=ANSWER_VARIES if outcome is not None else ()),
            early=due is not None and ctx.now() < due,
            misread=misread,
            effects=list(effects),
            outcome=outcome,
        )
    )


@dataclass(frozen=True)
class SimApp:
    app: BusApp
    shape: Shape
    entry: str
    """The endpoint the initial messages are sent to."""


def build_app(
    shape: Shape,
    mode: Mode = "token",
    suffix: str = "",
    *,
    receiver_mode: Mode | None = None,
    delay: float = 0.0,
    failures: int = 0,
    retry: RetryPolicy | None = None,
    oversized: int = 0,
    version: Version = "new",
    provider: Provider | None = None,
    effect_before_commit: bool = False,
    answer_outside: AnswerSender | None = None,
    at_most_once: AtMostOnce | None = None,
) -> SimApp:
    """The simulated application; ``mode`` is the endpoint mode every endpoint uses (the
    first one only when ``receiver_mode`` gives the others': a mixed-mode app) and
    ``suffix`` keeps the names of concurrent runs on one real account apart; ``version``
    (``Version``) what its second endpoint knows of Step; ``at_most_once`` makes the effect
    shape's service one that honours no key."""
    if shape not in (*SHAPES, "shared", "effect"):
        raise ValueError(f"unknown shape {shape!r}; choose one of {(*SHAPES, 'shared', 'effect')}")
    if shape == "effect":
        if provider is None:
            raise ValueError("the effect shape calls a provider: pass one")
        return _effect_app(
            mode,
            suffix,
            provider,
            before_commit=effect_before_commit,
            answer_outside=answer_outside,
            at_most_once=at_most_once,
        )
    used = {"single": 2, "chain": 3, "publish": 4, "mixed": 4, "shared": 3}[shape]
    names = [f"{name}{suffix}" for name in ENDPOINTS[:used]]
    app = BusApp()
    modes = [mode] + [mode if receiver_mode is None else receiver_mode] * (used - 1)
    first, second, *rest = (
        app.endpoint(name, Journal, mode=m, retry=retry if name == names[1] else None)
        for name, m in zip(names, modes, strict=True)
    )
    runs: dict[str, int] = {}
    """Runs of the second endpoint's Step handler per message, failed or not."""

    @first.handles(Start)
    def start(ctx: HandlerContext[Journal], message: Start) -> None:
        name = message.request
        record(ctx, name)
        if shape in ("single", "chain", "mixed"):
            ctx.send(
                Step(key=message.key, hop=1, path=f"{name}>step"),
                to=second.name,
                delay=timedelta(seconds=delay) if delay else None,
            )
        if shape in ("publish", "mixed"):
            ctx.publish(Happened(key=message.key, path=f"{name}>happened"))
        if shape == "shared":
            ctx.publish(Announced(key=message.key, path=f"{name}>announced", text=ANNOUNCEMENT))

    if shape == "shared":
        for endpoint in (second, *rest):
            endpoint.handles(Announced)(_on_announced)
        return SimApp(app, shape, first.name)

    if version == "old-misreading":
        second.handles(OldStep)(_misread_step)
    if version != "new":
        return SimApp(app, shape, first.name)

    @second.handles(Step)
    def step(ctx: HandlerContext[Journal], message: Step) -> None:
        runs[message.path] = runs.get(message.path, 0) + 1
        if runs[message.path] <= failures:
            raise RuntimeError(f"flaky dependency: run {runs[message.path]} of {message.path}")
        if runs[message.path] <= failures + oversized:
            ctx.state.ballast = BALLAST  # the commit is refused: a permanent failure
        record(ctx, message.path)
        if shape in ("chain", "mixed"):
            ctx.send(
                Step(key=message.key, hop=message.hop + 1, path=f"{message.path}>step"),
                to=names[2],
            )

    if rest:
        third = rest[0]

        @third.handles(Step)
        def last_step(ctx: HandlerContext[Journal], message: Step) -> None:
            record(ctx, message.path)

    subscribers = {"publish": (second, *rest), "mixed": tuple(rest)}.get(shape, ())
    for endpoint in subscribers:
        endpoint.handles(Happened)(_on_happened)
    return SimApp(app, shape, first.name)


def _misread_step(ctx: HandlerContext[Journal], message: OldStep) -> None:
    body = ctx.envelope.body or {}
    record(ctx, str(body.get("path", "")), misread=True)


def _on_happened(ctx: HandlerContext[Journal], event: Happened) -> None:
    record(ctx, event.path)


def _on_announced(ctx: HandlerContext[Journal], event: Announced) -> None:
    handler_ran()  # its body is the shared payload (NoPayloadReadByCopies)
    record(ctx, event.path)


class Charged(EffectAnswered):
    """The answer to the effect shape's charge."""


EFFECT_CALL_TIMEOUT = 60.0
"""Seconds a simulated call may take: in-memory calls never wait, so only a hung run meets it."""
PERFORMER_RETRY = RetryPolicy(delays=(40.0,), jitter=0.0)
"""The idempotent performer's retry policy: as in production (``BUS_EFFECT_RETRIES``), an
unknown outcome is retried after a delay, here longer than the world's ``late_limit`` (31 s),
by which a call the provider took has landed. A retry that comes sooner, or a racing copy,
meets the provider still working on it: answered 409, "in progress", and retried again."""


AnswerSender = Callable[[Command, str], Awaitable[object]]
"""Sends an answer to an endpoint outside the performer's commit (a known-bad variant)."""


@dataclass(frozen=True)
class AtMostOnce:
    """The effect shape's service honours no idempotency key. ``markers``: the performer's
    marker table; ``retried`` (a known-bad variant): the service is declared idempotent all
    the same, so the performer calls again after an unknown outcome, without a marker."""

    markers: EffectMarkers
    retried: bool = False


def _effect_app(
    mode: Mode,
    suffix: str,
    provider: Provider,
    *,
    before_commit: bool,
    answer_outside: AnswerSender | None,
    at_most_once: AtMostOnce | None,
) -> SimApp:
    """The ``effect`` shape. Known-bad variants: ``before_commit`` also calls the provider
    from the handler, before its round commits, as a handler that calls its provider directly
    would; ``answer_outside`` replaces the bus's performer with one that sends the answer
    itself, on every run, instead of in its commit."""
    app = BusApp()
    first = app.endpoint(f"{ENDPOINTS[0]}{suffix}", Journal, mode=mode)

    @first.handles(Start)
    async def start(ctx: HandlerContext[Journal], message: Start) -> None:
        body = {"order": message.request}
        key = ctx.request_effect(service="payments", operation="charge", body=body, answer=Charged)
        if before_commit:
            await provider.call("charge", body, key)
        record(ctx, message.request, effects=(key,))

    @first.handles(Charged)
    def charged(ctx: HandlerContext[Journal], answer: Charged) -> None:
        requested = [a.name for a in ctx.state.applied if answer.key in a.effects]
        if not requested:
            raise RuntimeError(f"an answer for effect {answer.key}, which no entry requested")
        if at_most_once is None:
            record(ctx, f"{requested[0]}>{answer.outcome}")
        else:
            record(ctx, f"{requested[0]}>answered", outcome=answer.outcome)

    # amo-retried declares the key-less service as idempotent: no marker, retried.
    declared = at_most_once is not None and not at_most_once.retried
    service = app.service("payments", operations={"charge": "/v1/charges"}, at_most_once=declared)
    if at_most_once is not None:
        add_performer(
            app,
            {"payments": provider},
            call_timeout=EFFECT_CALL_TIMEOUT,
            markers=at_most_once.markers,
        )
    elif answer_outside is None:
        add_performer(
            app, {"payments": provider}, call_timeout=EFFECT_CALL_TIMEOUT, retry=PERFORMER_RETRY
        )
    else:
        _add_answering_performer(app, service, provider, answer_outside)
    return SimApp(app, "effect", first.name)


def _add_answering_performer(
    app: BusApp, service: ServiceDeclaration, provider: Provider, send: AnswerSender
) -> None:
    performer: Endpoint[NoState] = app.endpoint(PERFORMER_ENDPOINT)

    @performer.handles(EffectRequest)
    async def perform(ctx: HandlerContext[NoState], request: EffectRequest) -> None:
        answer = await provider.call(request.operation, request.body, request.key)
        charged = Charged(
            partition=request.partition,
            key=request.key,
            outcome=outcome_of(answer, service),
            status=answer.status,
            body=answer.body,
        )
        await send(charged, request.reply_to)
