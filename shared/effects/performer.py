"""The performer endpoint: calls the provider of each committed effect request with its key,
and sends the answer as a message in its own commit (``docs/effects.md``, section 3).

A performer's handler may run more than once for one request (racing copies, retries after an
unknown outcome); each run sends the request's own key, so the provider applies it once, and
only the run whose round commits sends the answer.

A service declared ``at_most_once`` honours no key, so a repeated call may apply twice: its
call is made only by the run that inserts the effect's marker first (``EffectMarkers``), and
any outcome that leaves open whether it applied is answered ``uncertain`` rather than retried
(``docs/effects.md``, section 5)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from shared.bus.app import BusApp, Endpoint, NoState
from shared.bus.context import HandlerContext
from shared.bus.effects import (
    PERFORMER_ENDPOINT,
    EffectAnswered,
    EffectRequest,
    Outcome,
    ServiceDeclaration,
)
from shared.bus.messages import declared_type
from shared.bus.retries import RetryPolicy
from shared.effects.markers import EffectMarkers
from shared.effects.provider import Provider, ProviderAnswer, outcome_of
from shared.effects.telemetry import count_uncertain, observed_call
from shared.errors import ConfigurationError, ProviderUnavailable, UndeclaredService
from shared.logsafe import shown

logger = logging.getLogger(__name__)

NO_ANSWER = ProviderAnswer(0, {})
"""What an ``uncertain`` answer carries when the provider gave none (status 0)."""


def add_performer(
    app: BusApp,
    providers: Mapping[str, Provider],
    *,
    call_timeout: float,
    retry: RetryPolicy | None = None,
    markers: EffectMarkers | None = None,
    name: str = PERFORMER_ENDPOINT,
) -> Endpoint[NoState]:
    """Declare the performer endpoint of ``app``, calling each service the app declares
    (``BusApp.service``) through its provider in ``providers``. ``call_timeout`` (seconds)
    bounds each call: it must stay below the queue's lease, so a slow provider becomes a
    retry with the same key, not a message held past its lease. A service whose declared
    timeout is shorter gets its own. ``markers`` keeps the markers of the at-most-once
    services' effects: required when the app declares one."""
    missing = sorted(set(app.services) - set(providers))
    if missing:
        raise ConfigurationError(f"no provider for the declared services {missing}")
    unmarked = sorted(name for name, s in app.services.items() if s.at_most_once)
    if unmarked and markers is None:
        raise ConfigurationError(
            f"the at-most-once services {unmarked} need a marker table (add_performer markers=)"
        )
    endpoint: Endpoint[NoState] = app.endpoint(name, retry=retry)
    services = {name: providers[name] for name in app.services}

    @endpoint.handles(EffectRequest)
    async def perform(ctx: HandlerContext[NoState], request: EffectRequest) -> None:
        declared = app.services.get(request.service)
        if declared is None:
            raise UndeclaredService(f"effect {request.key}: no service {shown(request.service)}")
        declared.path(request.operation)  # an undeclared operation is refused here too
        provider = services[declared.name]
        answer_model = _answer_model(request)
        seconds = min(declared.timeout_seconds, call_timeout)
        if declared.at_most_once:
            outcome, answer = await _at_most_once(
                ctx, request, declared, provider, markers, seconds
            )
        else:
            with observed_call(declared.name, request.operation, request.key) as call:
                answer = await _call(provider, request, seconds)
                outcome = outcome_of(answer, declared)
                call.answered(answer.status, outcome)
        ctx.send(
            answer_model(
                partition=request.partition,
                key=request.key,
                outcome=outcome,
                status=answer.status,
                body=answer.body,
            ),
            to=request.reply_to,
        )

    return endpoint


async def _call(provider: Provider, request: EffectRequest, call_timeout: float) -> ProviderAnswer:
    """One call under the committed key; no answer within ``call_timeout`` is an unknown
    outcome (ProviderUnavailable), like a dropped connection."""
    try:
        async with asyncio.timeout(call_timeout):
            return await provider.call(request.operation, request.body, request.key)
    except TimeoutError:
        raise ProviderUnavailable(f"effect {request.key}: no answer in {call_timeout} s") from None


async def _at_most_once(
    ctx: HandlerContext[NoState],
    request: EffectRequest,
    declared: ServiceDeclaration,
    provider: Provider,
    markers: EffectMarkers | None,
    call_timeout: float,
) -> tuple[Outcome, ProviderAnswer]:
    """Call only if this run inserts the marker; answer ``uncertain`` for a marker already
    there (the call may have been made) and for an outcome the call leaves unknown (an "in
    progress" status included: no key is honoured, so it proves nothing). A "key reused"
    status still raises: parked, as for any service."""
    if markers is None:  # add_performer refuses this; never call such a service unmarked
        raise ConfigurationError(f"service {request.service} is at-most-once: no marker table")
    if not await markers.mark(request.key, request_id=ctx.message_id, at=ctx.now()):
        return _uncertain(request, NO_ANSWER, "its marker was already there")
    with observed_call(request.service, request.operation, request.key) as call:
        try:
            answer = await _call(provider, request, call_timeout)
        except ProviderUnavailable as e:
            call.answered(NO_ANSWER.status, "uncertain")
            return _uncertain(request, NO_ANSWER, str(e))
        try:
            outcome = outcome_of(answer, declared)
        except ProviderUnavailable as e:
            call.answered(answer.status, "uncertain")
            return _uncertain(request, answer, str(e))
        call.answered(answer.status, outcome)
    return outcome, answer


def _uncertain(
    request: EffectRequest, answer: ProviderAnswer, why: str
) -> tuple[Outcome, ProviderAnswer]:
    """Counted by service and operation (both declared names, checked before the call)."""
    count_uncertain(request.service, request.operation)
    logger.warning(
        "effect %s of %s/%s is uncertain, not called again: %s",
        shown(request.key),
        request.service,
        request.operation,
        shown(why),
    )
    return "uncertain", answer


def _answer_model(request: EffectRequest) -> type[EffectAnswered]:
    model = declared_type(request.answer_type)
    if not (isinstance(model, type) and issubclass(model, EffectAnswered)):
        raise UndeclaredService(
            f"effect {request.key}: {shown(request.answer_type)} is not an answer type"
        )
    return model
