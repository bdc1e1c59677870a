"""``python -m lab.host``: run a function app locally, where Core Tools are not available.

It reads ``function_app.py`` (its bindings), ``host.json`` and ``local.settings.json`` from
the app folder; settings are resolved by ``shared.settings`` (docs/settings.md, "Where
settings come from"; an ambiguous storage connection stops it with exit 3) and handed to the
app as its environment, as the Functions host does. Before serving it checks that storage
answers and the queues exist, and exits 3 saying why when not. It prints ``host: ready``
(with ``port=`` when it serves HTTP functions) once every trigger is running, and stops
gracefully on SIGTERM or Ctrl-C, exiting 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
import sys
from pathlib import Path

from lab.host import chaos
from lab.host.functions import load_functions
from lab.host.host import HostConfig, LocalHost
from lab.host.http import MAX_CONNECTIONS, MAX_REQUEST_BYTES, Keys
from shared import runtime
from shared.connection_sources import DEFAULTS
from shared.errors import BusError
from shared.logsafe import ContinuedLines
from shared.settings import load_storage_settings, resolve_settings
from shared.storage_check import check_storage_ready

FUNCTION_KEY_SETTING = "BUS_HOST_FUNCTION_KEY"
MASTER_KEY_SETTING = "BUS_HOST_MASTER_KEY"

EXIT_OK = 0
EXIT_CONFIGURATION = 3


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab.host",
        description="Run the queue, timer and HTTP functions of a function app locally.",
    )
    p.add_argument("--app", type=Path, default=Path("function_app.py"), help="the app file")
    p.add_argument("--host-json", type=Path, help="default: host.json beside the app")
    p.add_argument(
        "--settings", type=Path, help="default: local.settings.json beside the app (optional)"
    )
    p.add_argument("--bind", default="127.0.0.1", help="HTTP listen address")
    p.add_argument("--port", type=int, default=7071, help="HTTP port (0: any free port)")
    p.add_argument(
        "--lease-seconds",
        type=float,
        help="how long a received queue message stays hidden while running (renewed at "
        "half-time); a crashed host's messages come back after this long (default 60)",
    )
    p.add_argument("--drain-seconds", type=float, default=30.0, help="graceful stop budget")
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=MAX_REQUEST_BYTES,
        help="largest HTTP request body read (default 100 MB, the Functions host's limit); "
        "a larger one gets 413 without being read",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        help=f"HTTP connections open at once (default {MAX_CONNECTIONS}); one more is "
        "answered 503 and closed",
    )
    p.add_argument("--functions", nargs="+", help="run only these functions")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also log every storage request and answer (the Azure SDK's HTTP logging)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:
        # A traceback's lines are indented: only a real record starts at the margin.
        handler.setFormatter(ContinuedLines("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # The host says what it does (one line per message, from shared.bus); the SDK's own
    # INFO lines are two dozen per storage request, so they wait for --verbose.
    logging.getLogger("azure").setLevel(logging.INFO if args.verbose else logging.WARNING)
    folder = args.app.resolve().parent
    try:
        settings = resolve_settings(local_file=args.settings or folder / "local.settings.json")
        if settings.configures(settings.storage_setting):
            # Before the file's values join the environment, where the app's worker could no
            # longer tell them apart: an ambiguous connection is refused here, saying which is
            # where (shared.connection_sources).
            settings.storage()
            settings.state_storage()  # the state account's, when it has a connection of its own
        for name, value in settings.values.items():
            if settings.origin(name) != DEFAULTS:
                os.environ.setdefault(name, value)
        config = HostConfig.from_host_json(
            args.host_json or folder / "host.json", args.lease_seconds
        )
        config = HostConfig(
            config.queues,
            config.function_timeout,
            args.drain_seconds,
            args.max_request_bytes,
            args.max_connections,
        )
        # Faults and the outcome log, when the settings ask for them, wrap the worker the
        # app builds on import (``shared.runtime``): set before the app is loaded.
        wrappers = chaos.wrappers(settings)
        if wrappers is not None:
            runtime.wrap(wrappers)
        app = load_functions(args.app, os.environ, set(args.functions) if args.functions else None)
    except BusError as e:
        print(f"host: configuration error: {e}", file=sys.stderr)
        return EXIT_CONFIGURATION
    keys = Keys(
        os.environ.get(FUNCTION_KEY_SETTING) or secrets.token_urlsafe(24),
        os.environ.get(MASTER_KEY_SETTING) or secrets.token_urlsafe(24),
    )
    host = LocalHost(app, config, os.environ, keys)
    try:
        asyncio.run(_serve(host, args.bind, args.port))
    except BusError as e:
        print(f"host: configuration error: {e}", file=sys.stderr)
        return EXIT_CONFIGURATION
    except OSError as e:
        print(f"host: cannot listen on {args.bind}:{args.port}: {e}", file=sys.stderr)
        return EXIT_CONFIGURATION
    print("host: stopped", flush=True)
    return EXIT_OK


async def _serve(host: LocalHost, bind: str, port: int) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)

    await _check_storage(host)

    def ready(host: LocalHost) -> None:
        print("Functions:", *host.describe(), sep="\n")
        if host.app.http and FUNCTION_KEY_SETTING not in os.environ:
            print(f"function key for this run: {host.keys.function} (set {FUNCTION_KEY_SETTING})")
        port = f" port={host.port}" if host.port is not None else ""
        print(f"host: ready{port} pid={os.getpid()}", flush=True)

    await host.run(stopping, bind, port, ready)


async def _check_storage(host: LocalHost) -> None:
    """Fail fast, saying why, when a connection's storage does not answer, refuses access or
    lacks the queues: otherwise the queue workers would wait in silence."""
    by_connection: dict[str, list[str]] = {}
    for queue in host.app.queues:
        by_connection.setdefault(queue.connection, []).append(queue.queue_name)
    for connection, queues in by_connection.items():
        describe = f"{connection} ({load_storage_settings(host.environ, connection).describe()})"
        try:
            await check_storage_ready(host.account(connection), queues, describe=describe)
        except BusError:
            await host.close()
            raise


if __name__ == "__main__":
    sys.exit(main())
