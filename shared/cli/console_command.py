"""``bus console``: the operator console on this machine, until interrupted.

It prints one line on stdout, ``console: http://HOST:PORT/?token=TOKEN``: the page reads the
token once from that address and sends it with every request after. Who acts is ``--by`` or
the user signed in here, as for ``bus poison discard``; ``--read-only`` (or
BUS_CONSOLE_READ_ONLY) refuses every action.
"""

from __future__ import annotations

import secrets

from shared.cli.commands import EXIT_OK
from shared.cli.discard_command import operator_name
from shared.console.api import Console
from shared.console.guard import MAX_WHO_CHARS, BearerToken, Guard
from shared.console.local_server import new_token, serve
from shared.runtime import Worker

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


async def console_command(
    worker: Worker, *, host: str, port: int, read_only: bool, by: str | None
) -> int:
    who = operator_name(by)
    if not who.strip() or len(who) > MAX_WHO_CHARS:
        raise ValueError(f"--by names who acts: 1 to {MAX_WHO_CHARS} characters")
    token = new_token()
    guard = Guard(
        identify=BearerToken(token, who),
        csrf_key=secrets.token_bytes(32),
        read_only=read_only or worker.app_config.console.read_only,
    )
    await serve(Console(worker, guard), host, port, token)
    return EXIT_OK
