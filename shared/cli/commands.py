"""The operator commands, each an async function of a worker (the configured app on an open
storage account).

They print what they did (JSON where a script may read it) and return an exit code.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from shared.account_in_use import AccountInUse
from shared.bus import Command
from shared.bus.app import Store
from shared.bus.client_cancel import cancel_by_key
from shared.bus.subscriptions import MissingSubscription, missing_subscriptions
from shared.bus.unsubscribed import unsubscribed_counts
from shared.cleanup.backlog import TokensInFlight, tokens_in_flight
from shared.cleanup.summary import cleanup_summary
from shared.cli.records import Counts, count_records, describe
from shared.clock import to_datetime
from shared.errors import NotFound
from shared.http_ingress import BadRequest, build_message
from shared.logsafe import shown
from shared.provisioning import provision
from shared.resources import (
    RESOURCES_FILE,
    check_resources_file,
    poison_queue,
    resources_json,
    rows_container,
)
from shared.runtime import Worker
from shared.terminal import ProgressBar, table

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIGURATION = 3
EXIT_UNHEALTHY = 4
EXIT_LEASED = 5


def say(text: str) -> None:
    """Print to stdout. A reader that stopped reading (``bus status --json | head``) does not
    stop the command: the rest of its output goes nowhere and its exit code stands."""
    try:
        print(text)
    except BrokenPipeError:
        reader_gone()


def reader_gone() -> None:
    """Point stdout at /dev/null, so that no later write, nor the interpreter's last flush at
    exit, fails (or prints a traceback) for want of a reader."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def print_json(value: object) -> None:
    say(json.dumps(value, indent=2, default=str))


def account_json(worker: Worker) -> dict[str, str | None]:
    """The account the worker uses, as ``--json`` reports name it (``shared.account_in_use``)."""
    return AccountInUse.of(worker.app_config.require_storage()).as_json()


def state_account_json(worker: Worker) -> dict[str, dict[str, str | None]]:
    """``{"state_account": ...}`` when the endpoints' rows are in an account of their own,
    else nothing: a single app's report is as before."""
    if not worker.separate_state:
        return {}
    return {"state_account": AccountInUse.of(worker.app_config.require_state_storage()).as_json()}


async def resources_command(worker: Worker) -> int:
    """Print ``infra/resources.json`` for the app: ``bus resources > infra/resources.json``."""
    print(resources_json(worker.resources), end="")
    return EXIT_OK


async def provision_command(worker: Worker, resources_file: Path = RESOURCES_FILE) -> int:
    """Create the app's resources, once ``infra/resources.json`` (what Bicep provisions in
    Azure) matches the app: each endpoint's table in the state account, the rest in the
    messaging account (``shared.provisioning``), the PostgreSQL schema and the Cosmos DB
    database and containers of the endpoints kept there."""
    check_resources_file(worker.resources, resources_file)
    report = await provision(worker.account(), worker.resources, state=worker.state_account())
    say(report.summary())
    sql = worker.sql()
    if sql is not None:  # the schema of endpoints that keep their state in PostgreSQL
        for line in await sql.migrate(worker.sql_endpoints()):
            say(line)
    cosmos = worker.cosmos()
    if cosmos is not None:  # the database and containers of store="cosmos" endpoints
        for line in await cosmos.provision(worker.cosmos_endpoints()):
            say(line)
    return EXIT_OK


async def send_command(
    worker: Worker,
    type_name: str,
    body: dict[str, Any],
    *,
    to: str | None,
    key: str | None,
    publish: bool,
    delay: timedelta | None = None,
) -> int:
    """``send`` a command or ``publish`` an event through the ingress (exactly once per key
    within the ingress window); with ``delay``, it is not processed before then."""
    sent = build_message(worker.app, type_name, body, to, config=worker.config, to_field="--to")
    message = sent.message
    if publish and isinstance(message, Command):
        raise ValueError(f"{type_name} is a command: use `send`, not `publish`")
    if not publish and not isinstance(message, Command):
        raise ValueError(f"{type_name} is an event: use `publish`, not `send`")
    if key is None:
        key = f"cli-{uuid.uuid4()}"
        print(f"no --key given: using {key} (pass it again to retry safely)", file=sys.stderr)
    receipt = await (
        worker.bus()
        .client("cli")
        .submit(message, to=sent.to, idempotency_key=key, delay=delay, request=sent.request)
    )
    print_json(receipt.as_json())
    return EXIT_OK


async def cancel_command(worker: Worker, key: str, *, scope: str) -> int:
    """Cancel what was sent under ``key`` in ``scope`` (``shared.bus.client_cancel``); prints
    the answer as JSON. Exit 1 when the scope sent nothing under the key."""
    receipt = await cancel_by_key(worker.bus(), key, sender="cli", scope=scope)
    if receipt is None:
        say(f"nothing was sent under key {key!r} in scope {scope}")
        return EXIT_FAILED
    print_json(receipt.as_json())
    return EXIT_OK


async def subscribe_command(
    worker: Worker, topic: str | None, endpoint: str | None, *, subscribe: bool
) -> int:
    bus = worker.bus()
    if topic is None:
        for done_topic, done_endpoint in await bus.subscribe_all():
            say(f"{done_endpoint} subscribed to {done_topic}")
        return EXIT_OK
    if endpoint is None:
        raise BadRequest(f"topic {topic!r}: name the endpoint, or leave out both for all")
    if subscribe:
        bus.app.routes.check_subscription(topic, endpoint)
        changed = await bus.topics.subscribe(topic, endpoint)
        say(f"{endpoint} {'subscribed to' if changed else 'was already subscribed to'} {topic}")
    else:
        changed = await bus.topics.unsubscribe(topic, endpoint)
        say(f"{endpoint} {'unsubscribed from' if changed else 'was not subscribed to'} {topic}")
    return EXIT_OK


async def status_report(worker: Worker, progress: bool | None) -> dict[str, Any]:
    """Queue depths, poison counts and the mode's deduplication records per endpoint; tokens
    in flight by sender, with the age of each sender's oldest due one; events dropped for
    want of a subscriber; handling endpoints not subscribed to their topics."""
    account, endpoints = worker.account(), list(worker.app.endpoints.values())
    rows: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    with ProgressBar("status", len(endpoints) + 1, enabled=progress) as bar:
        for endpoint in endpoints:
            row: dict[str, Any] = {"mode": endpoint.mode, "store": endpoint.store}
            for label, queue in (("queue", endpoint.name), ("poison", poison_queue(endpoint.name))):
                try:
                    row[label] = await account.queue(queue).approximate_count()
                except NotFound:
                    row[label] = None
                    missing.append(f"queue {queue}")
            try:
                rows_of = worker.bus().endpoint_state(endpoint.name)
                row.update(await count_records(endpoint, rows_of))
            except NotFound:
                missing.append(_rows_missing(worker, endpoint.name, endpoint.store))
            rows[endpoint.name] = row
            bar.advance(note=endpoint.name)
        now = to_datetime(worker.config.clock())
        try:
            container = account.blob_container(worker.config.tokens_container)
            tokens = await tokens_in_flight(container, now)
        except NotFound:
            tokens = TokensInFlight({}, complete=True)
            missing.append("container tokens")
        bar.advance(note="tokens")
    topics = account.blob_container(worker.config.topics_container)
    try:
        dropped = await unsubscribed_counts(topics)
        gaps = await missing_subscriptions(worker.app, worker.recipient_lists())
    except NotFound:
        dropped, gaps = {}, []
        missing.append("container topics")
    return {
        "endpoints": rows,
        "tokens_in_flight": tokens.total,
        "tokens_by_sender": {k: v.count for k, v in sorted(tokens.senders.items()) if v.count},
        "tokens_received": sum(v.received for v in tokens.senders.values()),
        "oldest_token_age_seconds": {
            k: round(v.age_seconds(now), 3) for k, v in sorted(tokens.senders.items())
        },
        "unsubscribed_events": dropped,
        "unsubscribed_handlers": [gap.as_dict() for gap in gaps],
        "missing": missing,
    }


def _in_state(worker: Worker) -> str:
    """Where an endpoint's table is, when it is not in the one account."""
    return " in the state account" if worker.separate_state else ""


def _rows_missing(worker: Worker, endpoint: str, store: Store) -> str:
    """What is missing when an endpoint's rows cannot be found, in the store it declares:
    what ``bus provision`` creates for it."""
    if store == "postgres":
        return "the bus schema"
    if store == "cosmos":
        return f"Cosmos DB container {endpoint}"
    if store == "blob":
        return f"container {rows_container(endpoint)}{_in_state(worker)}"
    return f"table {endpoint}{_in_state(worker)}"


def _records_of(row: dict[str, Any]) -> Counts | None:
    counts = {k: v for k, v in row.items() if k not in ("mode", "store", "queue", "poison")}
    return counts or None


async def status_command(
    worker: Worker, *, as_json: bool, check: bool, progress: bool | None
) -> int:
    report = await app_status(worker, progress)
    if as_json:
        print_json(report)
    else:
        say_status(report)
    return status_exit(report, check=check)


async def app_status(worker: Worker, progress: bool | None) -> dict[str, Any]:
    """The app's status as ``bus status --json`` reports it, the accounts it read named."""
    report = await status_report(worker, progress)
    return {"account": account_json(worker), **state_account_json(worker), **report}


def say_status(report: dict[str, Any]) -> None:
    """One app's status as text."""
    say(
        table(
            ("endpoint", "mode", "store", "queue", "poison", "records"),
            (
                (
                    name,
                    row["mode"],
                    row["store"],
                    row["queue"],
                    row["poison"],
                    describe(_records_of(row)),
                )
                for name, row in report["endpoints"].items()
            ),
            right=("queue", "poison"),
        )
    )
    # Senders are the first segment of blob names: whatever may write there chose them.
    by_sender = ", ".join(f"{shown(k, 60)} {v}" for k, v in report["tokens_by_sender"].items())
    say(
        f"tokens in flight: {report['tokens_in_flight']}"
        + (f" ({by_sender})" * bool(by_sender))
        + f"; claimed by their receivers: {report['tokens_received']}"
    )
    for topic, count in report["unsubscribed_events"].items():
        say(f"events dropped, topic {topic} has no subscriber: {count}")
    for gap in report["unsubscribed_handlers"]:
        say(f"not subscribed: {MissingSubscription(gap['topic'], gap['endpoint'])}")
    for item in report["missing"]:
        say(f"missing: {item} (run `bus provision`)")


def status_exit(report: dict[str, Any], *, check: bool) -> int:
    """The exit code of one app's status: missing resources, then (with ``--check``) poison
    messages or a handling endpoint not subscribed."""
    if report["missing"]:
        return EXIT_CONFIGURATION
    poisoned = sum(row["poison"] or 0 for row in report["endpoints"].values())
    unhealthy = poisoned or report["unsubscribed_handlers"]
    return EXIT_UNHEALTHY if check and unhealthy else EXIT_OK


async def cleanup_command(
    worker: Worker, *, grace_seconds: float | None, as_json: bool, wait: bool
) -> int:
    print("cleanup: running one pass over every endpoint...", file=sys.stderr)
    report = await worker.cleanup(grace_seconds=grace_seconds, wait=wait)
    if as_json:
        print_json({"account": account_json(worker), **report})
    else:
        say(cleanup_summary(report))
    leased = [t for t in report["tasks"] if t["skipped"] == "leased by another instance"]
    for task in leased:
        print(
            f"cleanup: {task['task']} is leased by another live instance "
            f"({task['leased_by']}); not cleaned in this pass, --wait waits for it",
            file=sys.stderr,
        )
    return EXIT_LEASED if leased else EXIT_OK
