"""The Azure Functions bindings of an app, generated from its endpoints.

``function_app.py`` registers ``blueprint(worker())``: one queue trigger per endpoint
(function name and queue both the endpoint's name), the HTTP ingress (``POST
/api/messages``) and its cancel (``POST /api/messages/cancel``), the health route (``GET
/api/health``), the cleanup timer, one HTTP function per web route the app declares
(``BusApp.route``, ``shared.web``; function key required, as for the ingress) and, when
``BUS_CONSOLE_ENABLED`` is set, the operator console (``/api/console/``, refused at start-up
without a credential of its own: ``shared.console.guard.deployed_identity``). The Functions
host indexes them when it imports ``function_app.py``, so the endpoint list lives in the
``BusApp`` only.

Every function first calls ``worker.serving()`` (the ingress within its request timeout, in
``Worker.ingress``): the first invocation in a process subscribes the endpoints to the topics
they handle (``shared.startup_subscription``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import azure.functions as func

from shared.bus.envelope import bus_message_id
from shared.bus.http_routes import HttpRoute
from shared.bus.pipeline import queue_text
from shared.cleanup.summary import cleanup_summary
from shared.console.function import DeployedConsole
from shared.errors import ConfigurationError
from shared.http_ingress import check_platform, response_headers
from shared.logsafe import shown
from shared.runtime import Worker
from shared.web import WebRequest

log = logging.getLogger(__name__)

FIXED_FUNCTIONS = ("health", "ingress", "cancel", "cleanup")
CONSOLE_FUNCTION = "console"
"""Bound too when BUS_CONSOLE_ENABLED is set (``shared.console.function``)."""
CLEANUP_SCHEDULE = "%CLEANUP_SCHEDULE%"
"""The cleanup timer's NCRONTAB schedule, read from the app setting of that name."""
RESERVED_PATHS = ("messages", "health", "console", "admin")
"""First path segments a web route may not take: the bus's own routes, and the host's."""


def blueprint(worker: Worker) -> func.Blueprint:
    """Every function of ``worker.app``, bound to ``worker``."""
    console = worker.app_config.console.enabled
    own = [*FIXED_FUNCTIONS, *[CONSOLE_FUNCTION] * console]
    clashes = sorted(set(worker.app.endpoints) & set(own))
    if clashes:
        raise ConfigurationError(
            f"endpoints {clashes} would share a function name with the bus's own functions "
            f"{own}: rename them"
        )
    _check_routes(worker, [*own, *worker.app.endpoints])
    # Before anything is bound: an ingress that would believe principal headers nobody
    # vouches for is refused here, as the console is (DeployedConsole) without a credential.
    check_platform(worker.config, worker.app_config.platform)
    bp = func.Blueprint()  # type: ignore[no-untyped-call]
    connection = worker.settings.storage_setting
    for endpoint in worker.app.endpoints:
        register = bp.queue_trigger(arg_name="msg", queue_name=endpoint, connection=connection)
        bp.function_name(endpoint)(register(_queue_function(worker, endpoint)))
    _http_functions(bp, worker)
    for route in worker.app.http_routes.values():
        _route_function(bp, worker, route)
    _cleanup_timer(bp, worker)
    if console:
        _console_function(bp, DeployedConsole(worker))
    return bp


def _queue_function(
    worker: Worker, endpoint: str
) -> Callable[[func.QueueMessage], Awaitable[None]]:
    async def receive(msg: func.QueueMessage) -> None:
        await worker.serving()
        body, tries = msg.get_body(), msg.dequeue_count or 1
        try:
            await worker.receive(endpoint, body, tries, msg.insertion_time)
        except Exception as error:
            # The host's own failure line names only its invocation and the queue message:
            # this line, written first, names the bus's message id beside it.
            log.error(
                "endpoint %s: message %s (queue message %s) failed on try %d: %s: %s; "
                "given back to the host to retry",
                endpoint,
                shown(bus_message_id(queue_text(body)) or "-", 100),
                shown(msg.id or "-", 100),
                tries,
                type(error).__name__,
                shown(error),
            )
            raise

    receive.__name__ = receive.__qualname__ = endpoint
    return receive


def _http_functions(bp: func.Blueprint, worker: Worker) -> None:
    @bp.function_name("health")
    @bp.route(route="health", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
    async def health(req: func.HttpRequest) -> func.HttpResponse:
        await worker.serving()
        status, body = await worker.health()
        return func.HttpResponse(body, status_code=status, mimetype="application/json")

    @bp.function_name("ingress")
    @bp.route(route="messages", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
    async def ingress(req: func.HttpRequest) -> func.HttpResponse:
        # worker.ingress runs worker.serving() itself, within the request's timeout.
        status, body = await worker.ingress(req.headers, req.get_body())
        return func.HttpResponse(
            body,
            status_code=status,
            headers=response_headers(status),
            mimetype="application/json",
        )

    @bp.function_name("cancel")
    @bp.route(route="messages/cancel", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
    async def cancel(req: func.HttpRequest) -> func.HttpResponse:
        # By the Idempotency-Key header alone: the body is not read (shared.http_cancel).
        status, body = await worker.cancel(req.headers)
        return func.HttpResponse(
            body,
            status_code=status,
            headers=response_headers(status),
            mimetype="application/json",
        )


def _check_routes(worker: Worker, taken: list[str]) -> None:
    """The app's web routes take function names and paths of their own."""
    routes = worker.app.http_routes.values()
    names = sorted({r.name.lower() for r in routes} & {t.lower() for t in taken})
    if names:
        raise ConfigurationError(
            f"web routes named {names} would share a function name with an endpoint or the "
            f"bus's own functions {taken}: name them otherwise (route(..., name=...))"
        )
    paths = sorted(r.path for r in routes if r.path.split("/")[0].lower() in RESERVED_PATHS)
    if paths:
        raise ConfigurationError(
            f"web routes {paths} start with a path the bus or the host serves "
            f"({', '.join(RESERVED_PATHS)}): move them"
        )


def _route_function(bp: func.Blueprint, worker: Worker, route: HttpRoute) -> None:
    async def serve(req: func.HttpRequest) -> func.HttpResponse:
        # worker.route runs worker.serving() itself, within the request's timeout.
        response = await worker.route(route.name, web_request(req))
        return func.HttpResponse(
            response.body,
            status_code=response.status,
            headers=dict(response.headers),
            mimetype=response.content_type,
        )

    serve.__name__ = serve.__qualname__ = route.name
    bind = bp.route(
        route=route.path, methods=list(route.methods), auth_level=func.AuthLevel.FUNCTION
    )
    bp.function_name(route.name)(bind(serve))


def web_request(req: func.HttpRequest) -> WebRequest:
    """The host's request as the project's own: nothing of ``azure.functions`` reaches a
    route handler."""
    return WebRequest(
        method=req.method,
        path=urlsplit(req.url).path,
        headers=dict(req.headers),
        body=req.get_body(),
        query=dict(req.params),
        route_params=dict(req.route_params),
    )


def _console_function(bp: func.Blueprint, console: DeployedConsole) -> None:
    # Anonymous to the host: a browser asks for the page's script and style without the
    # page's ?code=, so a function key could never load the page; and every host key opens a
    # function-level route, ingress clients' included. The console's own credential guards
    # every API request instead (DeployedConsole, settled at start-up).
    @bp.function_name(CONSOLE_FUNCTION)
    @bp.route(route="console/{*path}", methods=["GET", "POST"], auth_level=func.AuthLevel.ANONYMOUS)
    async def console_function(req: func.HttpRequest) -> func.HttpResponse:
        await console.worker.serving()
        return await console.handle(req)


def _cleanup_timer(bp: func.Blueprint, worker: Worker) -> None:
    @bp.function_name("cleanup")
    @bp.timer_trigger(arg_name="timer", schedule=CLEANUP_SCHEDULE, use_monitor=False)
    async def cleanup(timer: func.TimerRequest) -> None:
        # One line per pass at info, as `bus cleanup` prints it; the full report is logged
        # at debug by the cleanup job.
        await worker.serving()
        log.info("%s", cleanup_summary(await worker.cleanup()))
