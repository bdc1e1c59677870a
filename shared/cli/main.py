"""``bus``: the operator command line (also ``python -m shared.cli``).

Storage comes from the same settings as the function app: ``--connection-string``, else the
setting named by ``--setting`` (default AzureWebJobsStorage) from the environment or from
``local.settings.json`` in the current folder, else the local emulator.

Exit codes: 0 done; 1 failed (storage error); 2 bad usage or input; 3 configuration
(no connection, resources missing); 4 ``status --check`` found poison messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from shared.bus import Command, Event
from shared.cli import commands, poison_commands
from shared.errors import (
    BusError,
    ConfigurationError,
    InvalidName,
    NotFound,
    OutcomeUnknown,
    StorageError,
)
from shared.host.host import load_local_settings
from shared.http_ingress import BadRequest
from shared.sample.app import app as sample_app
from shared.settings import DEFAULT_SETTING, StorageSettings, load_storage_settings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount

PROBE_SECONDS = 10.0

EPILOG = """exit codes: 0 done, 1 failed (storage), 2 bad usage or input,
3 configuration (no connection or resources missing), 4 status --check found poison messages

examples:
  bus provision
  bus send PlaceOrder --to orders --key order-1 \\
      --body '{"order_id": "order-1", "customer": "ada", "amount_cents": 1250}'
  bus publish OrderPlaced --key op-1 \\
      --body '{"order_id": "o1", "customer": "ada", "amount_cents": 100}'
  bus status --check
  bus poison list payments
  bus replay payments --type ChargePayment --dry-run
  bus cleanup"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bus",
        description="Operate the exactly-once bus: send, publish, subscriptions, status, "
        "poison replay and cleanup.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--connection-string", help="storage connection string (overrides settings)")
    p.add_argument(
        "--setting",
        default=os.environ.get("BUS_STORAGE_SETTING", DEFAULT_SETTING),
        help="connection setting name (default: %(default)s)",
    )
    p.add_argument(
        "--settings-file",
        type=Path,
        default=Path("local.settings.json"),
        help="read Values from this file when present (default: %(default)s)",
    )
    _progress_options(p, default=None)
    sub = p.add_subparsers(dest="command", required=True, metavar="command")

    sub.add_parser("provision", help="create every queue, container and table (idempotent)")

    handled = {n: m for e in sample_app.endpoints.values() for n, (m, _) in e.handlers.items()}
    for name, verb, kind in (
        ("send", "send a command", Command),
        ("publish", "publish an event", Event),
    ):
        types = ", ".join(sorted(n for n, m in handled.items() if issubclass(m, kind)))
        s = sub.add_parser(
            name, help=f"{verb} exactly once per --key", description=f"Types: {types}"
        )
        s.add_argument("type", help="message type name, e.g. PlaceOrder")
        s.add_argument("--body", required=True, help="JSON object, or @file.json")
        s.add_argument("--key", help="idempotency key (default: a new one, printed)")
        if name == "send":
            s.add_argument("--to", help="destination endpoint (default: the one handling it)")

    s = sub.add_parser("subscribe", help="subscribe an endpoint to a topic (idempotent)")
    s.add_argument("--all", action="store_true", help="every endpoint to its events' topics")
    s.add_argument("topic", nargs="?", help="e.g. orderplaced")
    s.add_argument("endpoint", nargs="?", help="e.g. loyalty")
    s = sub.add_parser("unsubscribe", help="unsubscribe an endpoint from a topic (idempotent)")
    s.add_argument("topic", nargs="?")
    s.add_argument("endpoint", nargs="?")

    s = sub.add_parser(
        "status", help="queue depths, poison counts, each mode's dedup records, tokens"
    )
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--check", action="store_true", help="exit 4 when poison messages wait")

    s = sub.add_parser("poison", help="inspect poison messages")
    poison = s.add_subparsers(dest="poison_command", required=True, metavar="subcommand")
    s = poison.add_parser(
        "list", help="poison messages with why they were parked (looked at, not taken)"
    )
    s.add_argument("endpoints", nargs="*", help="endpoints (default: every one)")
    s.add_argument("--json", action="store_true", help="machine-readable output")

    s = sub.add_parser("replay", help="move poison messages back to their queues")
    s.add_argument("endpoints", nargs="*", help="endpoints (default with --all: every one)")
    s.add_argument("--all", action="store_true")
    s.add_argument("--limit", type=int, default=1000, help="per endpoint (default %(default)s)")
    s.add_argument("--id", action="append", default=[], help="only this message id (repeatable)")
    s.add_argument(
        "--type", action="append", default=[], help="only this message type (repeatable)"
    )
    s.add_argument("--dry-run", action="store_true", help="say what would be replayed, move none")

    s = sub.add_parser("cleanup", help="run one cleanup pass now")
    s.add_argument("--grace-seconds", type=float, help="override the grace period")
    s.add_argument("--json", action="store_true", help="the full report as JSON")

    # Accepted after the command too, where it leaves a value given before it alone.
    for command in [*sub.choices.values(), *poison.choices.values()]:
        _progress_options(command, default=argparse.SUPPRESS)
    return p


def _progress_options(p: argparse.ArgumentParser, default: object) -> None:
    bar = p.add_mutually_exclusive_group()
    bar.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=default,
        help="draw progress bars even when stderr is not a terminal",
    )
    bar.add_argument(
        "--no-progress", dest="progress", action="store_false", default=default, help="never"
    )


def open_account(args: argparse.Namespace) -> StorageAccount:
    if args.connection_string:
        return AzureStorageAccount(StorageSettings(connection_string=args.connection_string))
    environ = {**load_local_settings(args.settings_file), **os.environ}
    configured = any(k == args.setting or k.startswith(f"{args.setting}__") for k in environ)
    if not configured:
        # Nothing configured: the local emulator, like a fresh local.settings.json.
        environ[args.setting] = "UseDevelopmentStorage=true"
    return AzureStorageAccount(load_storage_settings(environ, args.setting))


def _body(text: str) -> dict[str, Any]:
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    try:
        value = json.loads(text)
    except ValueError as e:
        raise BadRequest(f"--body is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise BadRequest("--body must be a JSON object")
    return value


def _command(
    args: argparse.Namespace, usage: Callable[[str], None]
) -> Callable[[StorageAccount], Awaitable[int]]:
    """The chosen command bound to its arguments (usage errors are raised before any I/O)."""
    c = commands
    if args.command == "provision":
        return c.provision_command
    if args.command in ("send", "publish"):
        body = _body(args.body)
        to = getattr(args, "to", None)
        return lambda a: c.send_command(
            a, args.type, body, to=to, key=args.key, publish=args.command == "publish"
        )
    if args.command in ("subscribe", "unsubscribe"):
        everything = getattr(args, "all", False)
        if everything == (args.topic is not None) or (args.topic is None) != (
            args.endpoint is None
        ):
            usage(
                f"{args.command} takes TOPIC ENDPOINT"
                + (" or --all" * (args.command == "subscribe"))
            )
        return lambda a: c.subscribe_command(
            a, args.topic, args.endpoint, subscribe=args.command == "subscribe"
        )
    if args.command == "status":
        return lambda a: c.status_command(
            a, as_json=args.json, check=args.check, progress=args.progress
        )
    if args.command == "poison":
        listed = args.endpoints or list(sample_app.endpoints)
        return lambda a: poison_commands.poison_list_command(a, listed, as_json=args.json)
    if args.command == "replay":
        if args.all == bool(args.endpoints):
            usage("replay takes endpoint names or --all")
        names = list(sample_app.endpoints) if args.all else args.endpoints
        if args.limit < 1:
            usage("--limit must be at least 1")
        only = poison_commands.PoisonFilter(frozenset(args.id), frozenset(args.type))
        return lambda a: poison_commands.replay_command(
            a,
            names,
            limit=args.limit,
            progress=args.progress,
            only=only if args.id or args.type else None,
            dry_run=args.dry_run,
        )
    if args.command != "cleanup":
        usage(f"unknown command {args.command}")
    return lambda a: c.cleanup_command(a, grace_seconds=args.grace_seconds, as_json=args.json)


async def _run(
    args: argparse.Namespace, command: Callable[[StorageAccount], Awaitable[int]]
) -> int:
    async with open_account(args) as account:
        await _probe(account)
        return await command(account)


async def _probe(account: StorageAccount) -> None:
    """One cheap read first: the SDK retries an unreachable endpoint for over a minute, and
    an operator should hear at once that storage is not there."""
    try:
        async with asyncio.timeout(PROBE_SECONDS):
            await account.queue(next(iter(sample_app.endpoints))).approximate_count()
    except NotFound:
        pass  # reachable; the command reports what is missing
    except TimeoutError:
        raise OutcomeUnknown(
            f"storage did not answer within {PROBE_SECONDS:.0f}s: is it running "
            "(Azurite: node_modules/.bin/azurite) and is the connection setting right?"
        ) from None


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        command = _command(args, p.error)
        code = asyncio.run(_run(args, command))
    except BrokenPipeError:
        commands.reader_gone()
        return commands.EXIT_OK
    except (BadRequest, InvalidName, ValueError) as e:
        print(f"bus: {e}", file=sys.stderr)
        return commands.EXIT_USAGE
    except ConfigurationError as e:
        print(f"bus: configuration: {e}", file=sys.stderr)
        return commands.EXIT_CONFIGURATION
    except NotFound as e:
        # Whatever a command needs and storage does not have was never provisioned.
        print(f"bus: {e}: resources missing, run `bus provision`", file=sys.stderr)
        return commands.EXIT_CONFIGURATION
    except (StorageError, OutcomeUnknown, BusError) as e:
        print(f"bus: failed: {e}", file=sys.stderr)
        return commands.EXIT_FAILED
    try:
        sys.stdout.flush()  # here, where a closed pipe can still be handled
    except BrokenPipeError:
        commands.reader_gone()  # the command finished: its verdict stands
    return code
