"""The operator commands, each an async function of an open storage account.

They print what they did (JSON where a script may read it) and return an exit code.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

from shared import runtime
from shared.bus import Command
from shared.bus.poison import replay
from shared.cli.poisoned import read_poison
from shared.cli.records import count_records, describe
from shared.errors import NotFound
from shared.http_ingress import build_message
from shared.provisioning import provision
from shared.resources import load_resources, poison_queue
from shared.sample.app import app as sample_app
from shared.stores.account import StorageAccount
from shared.terminal import ProgressBar, table

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIGURATION = 3
EXIT_UNHEALTHY = 4


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


def _print_json(value: object) -> None:
    say(json.dumps(value, indent=2, default=str))


async def provision_command(account: StorageAccount) -> int:
    say((await provision(account, load_resources())).summary())
    return EXIT_OK


async def send_command(
    account: StorageAccount,
    type_name: str,
    body: dict[str, Any],
    *,
    to: str | None,
    key: str | None,
    publish: bool,
) -> int:
    """``send`` a command or ``publish`` an event through the ingress (exactly once per key
    within the ingress window)."""
    message, destination = build_message(sample_app, type_name, body, to)
    if publish and isinstance(message, Command):
        raise ValueError(f"{type_name} is a command: use `send`, not `publish`")
    if not publish and not isinstance(message, Command):
        raise ValueError(f"{type_name} is an event: use `publish`, not `send`")
    if key is None:
        key = f"cli-{uuid.uuid4()}"
        print(f"no --key given: using {key} (pass it again to retry safely)", file=sys.stderr)
    client = runtime.build_bus(account).client("cli")
    if isinstance(message, Command):
        assert destination is not None
        receipt = await client.send(message, to=destination, idempotency_key=key)
    else:
        receipt = await client.publish(message, idempotency_key=key)  # type: ignore[arg-type]
    _print_json(
        {
            "idempotency_key": receipt.idempotency_key,
            "message_ids": list(receipt.message_ids),
            "deduplicated": receipt.deduplicated,
        }
    )
    return EXIT_OK


async def subscribe_command(
    account: StorageAccount, topic: str | None, endpoint: str | None, *, subscribe: bool
) -> int:
    bus = runtime.build_bus(account)
    if topic is None:
        for done_topic, done_endpoint in await bus.subscribe_all():
            say(f"{done_endpoint} subscribed to {done_topic}")
        return EXIT_OK
    assert endpoint is not None
    if subscribe:
        changed = await bus.topics.subscribe(topic, endpoint)
        say(f"{endpoint} {'subscribed to' if changed else 'was already subscribed to'} {topic}")
    else:
        changed = await bus.topics.unsubscribe(topic, endpoint)
        say(f"{endpoint} {'unsubscribed from' if changed else 'was not subscribed to'} {topic}")
    return EXIT_OK


async def status_report(account: StorageAccount, progress: bool | None) -> dict[str, Any]:
    """Queue depths, poison counts and the mode's deduplication records per endpoint; tokens
    in flight."""
    endpoints = list(sample_app.endpoints.values())
    rows: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    with ProgressBar("status", len(endpoints) + 1, enabled=progress) as bar:
        for endpoint in endpoints:
            row: dict[str, Any] = {"mode": endpoint.mode}
            for label, queue in (("queue", endpoint.name), ("poison", poison_queue(endpoint.name))):
                try:
                    row[label] = await account.queue(queue).approximate_count()
                except NotFound:
                    row[label] = None
                    missing.append(f"queue {queue}")
            try:
                row.update(await count_records(account.table(endpoint.name), endpoint))
            except NotFound:
                missing.append(f"table {endpoint.name}")
            rows[endpoint.name] = row
            bar.advance(note=endpoint.name)
        senders: Counter[str] = Counter()
        try:
            container = runtime.bus_config().tokens_container
            async for blob in account.blob_container(container).list():
                senders[blob.name.split("/", 1)[0]] += 1
        except NotFound:
            missing.append("container tokens")
        bar.advance(note="tokens")
    return {
        "endpoints": rows,
        "tokens_in_flight": sum(senders.values()),
        "tokens_by_sender": dict(sorted(senders.items())),
        "missing": missing,
    }


def _records_of(row: dict[str, Any]) -> dict[str, int] | None:
    counts = {k: v for k, v in row.items() if k not in ("mode", "queue", "poison")}
    return counts or None


async def status_command(
    account: StorageAccount, *, as_json: bool, check: bool, progress: bool | None
) -> int:
    report = await status_report(account, progress)
    if as_json:
        _print_json(report)
    else:
        say(
            table(
                ("endpoint", "mode", "queue", "poison", "records"),
                (
                    (name, row["mode"], row["queue"], row["poison"], describe(_records_of(row)))
                    for name, row in report["endpoints"].items()
                ),
                right=("queue", "poison"),
            )
        )
        by_sender = ", ".join(f"{k} {v}" for k, v in report["tokens_by_sender"].items())
        say(
            f"tokens in flight: {report['tokens_in_flight']}"
            + (f" ({by_sender})" * bool(by_sender))
        )
        for item in report["missing"]:
            say(f"missing: {item} (run `bus provision`)")
    if report["missing"]:
        return EXIT_CONFIGURATION
    poisoned = sum(row["poison"] or 0 for row in report["endpoints"].values())
    return EXIT_UNHEALTHY if check and poisoned else EXIT_OK


def _check_endpoints(endpoints: list[str]) -> None:
    unknown = sorted(set(endpoints) - set(sample_app.endpoints))
    if unknown:
        raise ValueError(f"unknown endpoints {unknown}; known: {sorted(sample_app.endpoints)}")


@dataclass(frozen=True)
class PoisonFilter:
    """Which poison messages a replay takes: all, or those of these ids and/or types."""

    message_ids: frozenset[str] = frozenset()
    message_types: frozenset[str] = frozenset()

    def __call__(self, content: str) -> bool:
        record = read_poison(content)
        return (not self.message_ids or record.message_id in self.message_ids) and (
            not self.message_types or record.message_type in self.message_types
        )


async def replay_command(
    account: StorageAccount,
    endpoints: list[str],
    *,
    limit: int,
    progress: bool | None,
    only: PoisonFilter | None = None,
    dry_run: bool = False,
) -> int:
    """Move poison messages back to their queues; each is processed exactly once. Endpoints
    with nothing to replay are not mentioned."""
    _check_endpoints(endpoints)
    total = endpoints_replayed = 0
    verb = "would replay" if dry_run else "replayed"
    for endpoint in endpoints:
        waiting = await account.queue(poison_queue(endpoint)).approximate_count()
        if waiting == 0:
            continue
        with ProgressBar(f"replay {endpoint}", min(waiting, limit), enabled=progress) as bar:
            moved = await replay(
                account, endpoint, limit, select=only, dry_run=dry_run, on_moved=bar.advance
            )
        if moved:
            say(f"{endpoint}: {verb} {moved} poison messages")
            total += moved
            endpoints_replayed += 1
    if total:
        say(f"{verb} {total} messages from {endpoints_replayed} endpoints")
    else:
        say("nothing to replay")
    return EXIT_OK


async def poison_list_command(
    account: StorageAccount, endpoints: list[str], *, as_json: bool
) -> int:
    """Show the poison messages waiting, with what each says about why (peeked, not taken)."""
    _check_endpoints(endpoints)
    listed: list[dict[str, Any]] = []
    notes: list[str] = []
    for endpoint in endpoints:
        queue = account.queue(poison_queue(endpoint))
        peeked = await queue.peek(PEEK_LIMIT)
        for message in peeked:
            record = read_poison(message.content)
            listed.append(
                {
                    **record.to_json(),
                    "endpoint": record.endpoint or endpoint,
                    "parked_at": message.inserted_on.isoformat(timespec="seconds"),
                }
            )
        waiting = await queue.approximate_count()
        if len(peeked) == PEEK_LIMIT and waiting > PEEK_LIMIT:
            notes.append(
                f"{endpoint}: showing {PEEK_LIMIT} of about {waiting} (a queue shows at most "
                f"{PEEK_LIMIT} without taking them)"
            )
    if as_json:
        _print_json(listed)
    elif listed:
        say(table(POISON_COLUMNS, (_poison_row(item) for item in listed)))
    else:
        say("no poison messages")
    for note in notes:
        print(note, file=sys.stderr)
    return EXIT_OK


PEEK_LIMIT = 32
POISON_COLUMNS = (
    "endpoint",
    "message id",
    "type",
    "tries",
    "first failure",
    "last failure",
    "reason",
)
REASON_CHARS = 100


def _poison_row(item: dict[str, Any]) -> tuple[object, ...]:
    reason = " ".join(str(item["reason"]).split())  # one line, whatever it held
    if len(reason) > REASON_CHARS:
        reason = reason[: REASON_CHARS - 3] + "..."
    return (
        item["endpoint"],
        item["message_id"],
        item["message_type"],
        item["dequeue_count"],
        item["first_failure"],
        item["last_failure"] or item["parked_at"],
        reason,
    )


async def cleanup_command(
    account: StorageAccount, *, grace_seconds: float | None, as_json: bool
) -> int:
    print("cleanup: running one pass over every endpoint...", file=sys.stderr)
    if grace_seconds is None:
        report = await runtime.cleanup_now(account)
    else:
        report = await runtime.cleanup_now(account, grace_seconds=grace_seconds)
    if as_json:
        _print_json(report)
    else:
        say(cleanup_summary(report))
    return EXIT_OK


def cleanup_summary(report: dict[str, Any]) -> str:
    """One line: what the pass removed and kept, and whether it covered everything."""

    def counts(values: dict[str, int]) -> str:
        listed = ", ".join(f"{k} {v}" for k, v in values.items() if v)
        return f"{sum(values.values())}" + (f" ({listed})" * bool(listed))

    tasks = report["tasks"]
    skipped = sorted({str(t["skipped"]) for t in tasks if t["skipped"]})
    state = "complete" if report["complete"] else "incomplete, run it again to go on"
    return (
        f"cleanup: removed {counts(report['removed'])}, kept {counts(report['kept'])}; "
        f"{len(tasks)} tasks in {report['elapsed_seconds']:.1f} s, {state}"
        + (f"; skipped: {', '.join(skipped)}" * bool(skipped))
    )
