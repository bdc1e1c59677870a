"""The performer endpoint: calls the provider of each committed effect request with its key,
and sends the answer as a message in its own commit (``docs/effects.md``, section 3).

A performer's handler may run more than once for one request (racing copies, retries after an
unknown outcome); each run sends the request's own key, so the provider applies it once, and
only the run whose round commits sends the answer."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from shared.bus.app import BusApp, Endpoint, NoState
from shared.bus.context import HandlerContext
from shared.bus.effects import PERFORMER_ENDPOINT, EffectAnswered, EffectRequest
from shared.bus.messages import declared_type
from shared.bus.retries import RetryPolicy
from shared.effects.provider import Provider, outcome_of
from shared.effects.telemetry import observed_call
from shared.errors import ConfigurationError, ProviderUnavailable, UndeclaredService
from shared.logsafe import shown


def add_performer(
    app: BusApp,
    providers: Mapping[str, Provider],
    *,
    call_timeout: float,
    retry: RetryPolicy | None = None,
) -> Endpoint[NoState]:
    """Declare the performer endpoint of ``app``, calling each service the app declares
    (``BusApp.service``) through its provider in ``providers``. ``call_timeout`` (seconds)
    bounds each call: it must stay below the queue's lease, so a slow provider becomes a
    retry with the same key, not a message held past its lease. A service whose declared
    timeout is shorter gets its own."""
    missing = sorted(set(app.services) - set(providers))
    if missing:
        raise ConfigurationError(f"no provider for the declared services {missing}")
    endpoint: Endpoint[NoState] = app.endpoint(PERFORMER_ENDPOINT, retry=retry)
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
        with observed_call(declared.name, request.operation, request.key) as call:
            try:
                async with asyncio.timeout(seconds):
                    answer = await provider.call(request.operation, request.body, request.key)
            except TimeoutError:
                raise ProviderUnavailable(
                    f"effect {request.key}: no answer in {seconds} s"
                ) from None
            outcome = outcome_of(answer)
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


def _answer_model(request: EffectRequest) -> type[EffectAnswered]:
    model = declared_type(request.answer_type)
    if not (isinstance(model, type) and issubclass(model, EffectAnswered)):
        raise UndeclaredService(
            f"effect {request.key}: {shown(request.answer_type)} is not an answer type"
        )
    return model
