"""The console over a system of services (``bus console --system FILE``): one page, one
token, every app of the system file.

Each app has its own ``Console`` on its own worker (its names, its state account, the shared
messaging account), so a listing, a replay, a discard or the journal of one app never reads
or writes another's. Every API request names its app in the query (``?app=NAME``); the
request is authenticated before its app is looked at, so a stranger learns no app's name,
and an app the system does not list is refused. ``GET /api/session`` alone may leave the app
out: the page asks it first, to learn the apps, and is answered for the first one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from shared.console.api import Console
from shared.console.guard import Guard, Refused
from shared.console.headers import secured
from shared.console.http import Request, Response, error_response
from shared.logsafe import shown

log = logging.getLogger(__name__)

APP_PARAMETER = "app"
SESSION_PATH = "/api/session"


class SystemConsole:
    """The consoles of a system's apps behind one address, each chosen by ``?app=``;
    ``guard`` authenticates every API request before its app is chosen."""

    def __init__(self, consoles: Mapping[str, Console], guard: Guard) -> None:
        if not consoles:
            raise ValueError("a system console serves at least one app")
        self.consoles = dict(consoles)
        self.guard = guard
        self.first = next(iter(self.consoles.values()))

    async def handle(self, request: Request) -> Response:
        if not request.path.startswith("/api/"):
            return await self.first.handle(request)  # the page's files: the same for all
        try:
            self.guard.identify(request)
            console = self._console_for(request)
        except Refused as e:
            return secured(error_response(e.status, str(e), sign_in=e.sign_in), request.path)
        return await console.handle(request)

    def _console_for(self, request: Request) -> Console:
        named = request.query.get(APP_PARAMETER)
        if named is None:
            if request.path == SESSION_PATH:
                return self.first
            raise Refused(400, f"this console serves a system: name the app (?{APP_PARAMETER}=)")
        console = self.consoles.get(named)
        if console is None:
            log.info("console: refused app %s", shown(named, 100))
            raise Refused(404, "no such app in this system")
        return console
