"""``bus console``: the operator console on this machine, until interrupted.

It prints one line on stdout, ``console: http://HOST:PORT/?token=TOKEN``: the page reads the
token once from that address and sends it with every request after. Who acts is ``--by`` or
the user signed in here, as for ``bus poison discard``; ``--read-only`` (or
BUS_CONSOLE_READ_ONLY) refuses every action. With ``--system FILE`` it serves every app of the
system file, each on its own accounts (``shared.console.system``).
"""

from __future__ import annotations

import secrets
from contextlib import AsyncExitStack
from pathlib import Path

from shared.cli.commands import EXIT_OK
from shared.cli.discard_command import operator_name
from shared.cli.opened import opened_worker
from shared.console.api import Console, SystemPlace
from shared.console.guard import MAX_WHO_CHARS, BearerToken, Guard
from shared.console.local_server import new_token, serve
from shared.console.system import SystemConsole
from shared.runtime import Worker
from shared.system import load_system

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def _who(by: str | None) -> str:
    who = operator_name(by)
    if not who.strip() or len(who) > MAX_WHO_CHARS:
        raise ValueError(f"--by names who acts: 1 to {MAX_WHO_CHARS} characters")
    return who


async def console_command(
    worker: Worker, *, host: str, port: int, read_only: bool, by: str | None
) -> int:
    token = new_token()
    guard = Guard(
        identify=BearerToken(token, _who(by)),
        csrf_key=secrets.token_bytes(32),
        read_only=read_only or worker.app_config.console.read_only,
    )
    await serve(Console(worker, guard), host, port, token)
    return EXIT_OK


async def system_console_command(
    path: Path, *, host: str, port: int, read_only: bool, by: str | None
) -> int:
    """The console over every app of the system file at ``path``: one token and one CSRF key
    for all; each app read-only when ``--read-only`` or its own setting says so."""
    apps = load_system(path).load()
    token = new_token()
    identify = BearerToken(token, _who(by))
    csrf_key = secrets.token_bytes(32)
    names = tuple(app.name for app in apps)
    consoles: dict[str, Console] = {}
    async with AsyncExitStack() as opened:
        for app in apps:
            tool = f"bus (app {app.name})"
            worker = await opened.enter_async_context(
                opened_worker(app.app, app.config, require_resources=True, tool=tool)
            )
            guard = Guard(identify, csrf_key, read_only or app.config.console.read_only)
            consoles[app.name] = Console(worker, guard, SystemPlace(app.name, names))
        system_guard = Guard(identify, csrf_key, read_only=True)  # authenticates, never acts
        await serve(SystemConsole(consoles, system_guard), host, port, token)
    return EXIT_OK
