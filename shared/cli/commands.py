"""The operator commands, each an async function of a worker (the configured app on an open
storage account).

They print what they did (JSON where a script may read it) and return an exit code.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from shared.bus import Command
from shared.bus.poison import replay_report
from shared.bus.records import OUTBOX_PREFIX, OutboxRecord
from shared.bus.unsubscribed import unsubscribed_counts
from shared.cli.progress import Progress
from shared.errors import NotFound
from shared.http_ingress import BadRequest, build_message
from shared.provisioning import provision
from shared.resources import RESOURCES_FILE, check_resources_file, poison_queue, resources_json
from shared.runtime import Worker

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIGURATION = 3
EXIT_UNHEALTHY = 4
EXIT_LEASED = 5


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2, default=str))


async def resources_command(worker: Worker) -> int:
    """Print ``infra/resources.json`` for the app: ``bus resources > infra/resources.json``."""
    print(resources_json(worker.resources), end="")
    return EXIT_OK


async def provision_command(worker: Worker, resources_file: Path = RESOURCES_FILE) -> int:
    """Create the app's resources, once ``infra/resources.json`` (what Bicep provisions in
    Azure) matches the app."""
    check_resources_file(worker.resources, resources_file)
    print((await provision(worker.account(), worker.resources)).summary())
    return EXIT_OK


async def send_command(
    worker: Worker,
    type_name: str,
    body: dict[str, Any],
    *,
    to: str | None,
    key: str | None,
    publish: bool,
) -> int:
    """``send`` a command or ``publish`` an event through the ingress (exactly once per key
    within the ingress window)."""
    message, destination = build_message(worker.app, type_name, body, to)
    if publish and isinstance(message, Command):
        raise ValueError(f"{type_name} is a command: use `send`, not `publish`")
    if not publish and not isinstance(message, Command):
        raise ValueError(f"{type_name} is an event: use `publish`, not `send`")
    if key is None:
        key = f"cli-{uuid.uuid4()}"
        print(f"no --key given: using {key} (pass it again to retry safely)", file=sys.stderr)
    client = worker.bus().client("cli")
    if isinstance(message, Command):
        if destination is None:
            raise BadRequest(f"{type_name} is a command: name its endpoint with --to")
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
    worker: Worker, topic: str | None, endpoint: str | None, *, subscribe: bool
) -> int:
    bus = worker.bus()
    if topic is None:
        for done_topic, done_endpoint in await bus.subscribe_all():
            print(f"{done_endpoint} subscribed to {done_topic}")
        return EXIT_OK
    if endpoint is None:
        raise BadRequest(f"topic {topic!r}: name the endpoint, or leave out both for all")
    if subscribe:
        bus.app.routes.check_subscription(topic, endpoint)
        changed = await bus.topics.subscribe(topic, endpoint)
        print(f"{endpoint} {'subscribed to' if changed else 'was already subscribed to'} {topic}")
    else:
        changed = await bus.topics.unsubscribe(topic, endpoint)
        print(f"{endpoint} {'unsubscribed from' if changed else 'was not subscribed to'} {topic}")
    return EXIT_OK


async def status_report(worker: Worker, progress: bool | None) -> dict[str, Any]:
    """Queue depths, poison counts and open outbox records per endpoint; tokens in flight."""
    account, endpoints = worker.account(), list(worker.app.endpoints)
    bar = Progress("status", len(endpoints) + 1, enabled=progress)
    rows: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    for endpoint in endpoints:
        row: dict[str, Any] = {}
        for label, queue in (("queue", endpoint), ("poison", poison_queue(endpoint))):
            try:
                row[label] = await account.queue(queue).approximate_count()
            except NotFound:
                row[label] = None
                missing.append(f"queue {queue}")
        states: Counter[str] = Counter()
        try:
            async for entity in account.table(endpoint).query_all(row_key_prefix=OUTBOX_PREFIX):
                states[OutboxRecord.from_entity(entity).status] += 1
        except NotFound:
            missing.append(f"table {endpoint}")
        row["outbox_claimed"] = states["claimed"]
        row["outbox_committed"] = states["committed"]
        rows[endpoint] = row
        bar.advance(note=endpoint)
    senders: Counter[str] = Counter()
    try:
        container = worker.config.tokens_container
        async for blob in account.blob_container(container).list():
            senders[blob.name.split("/", 1)[0]] += 1
    except NotFound:
        missing.append("container tokens")
    bar.advance(note="tokens")
    bar.finish()
    topics = account.blob_container(worker.config.topics_container)
    try:
        dropped = await unsubscribed_counts(topics)
    except NotFound:
        dropped = {}
        missing.append("container topics")
    return {
        "endpoints": rows,
        "tokens_in_flight": sum(senders.values()),
        "tokens_by_sender": dict(sorted(senders.items())),
        "unsubscribed_events": dropped,
        "missing": missing,
    }


async def status_command(
    worker: Worker, *, as_json: bool, check: bool, progress: bool | None
) -> int:
    report = await status_report(worker, progress)
    if as_json:
        _print_json(report)
    else:
        header = f"{'endpoint':<16}{'queue':>8}{'poison':>8}{'outbox open':>13}{'committed':>11}"
        print(header)
        for name, row in report["endpoints"].items():
            queue = "-" if row["queue"] is None else row["queue"]
            poison = "-" if row["poison"] is None else row["poison"]
            print(
                f"{name:<16}{queue:>8}{poison:>8}{row['outbox_claimed']:>13}"
                f"{row['outbox_committed']:>11}"
            )
        by_sender = ", ".join(f"{k} {v}" for k, v in report["tokens_by_sender"].items())
        print(
            f"tokens in flight: {report['tokens_in_flight']}"
            + (f" ({by_sender})" * bool(by_sender))
        )
        for topic, count in report["unsubscribed_events"].items():
            print(f"events dropped, topic {topic} has no subscriber: {count}")
        for item in report["missing"]:
            print(f"missing: {item} (run `bus provision`)")
    if report["missing"]:
        return EXIT_CONFIGURATION
    poisoned = sum(row["poison"] or 0 for row in report["endpoints"].values())
    return EXIT_UNHEALTHY if check and poisoned else EXIT_OK


async def replay_command(
    worker: Worker, endpoints: list[str], *, limit: int, progress: bool | None
) -> int:
    """Move poison messages back to their queues; each is processed exactly once."""
    account, known = worker.account(), sorted(worker.app.endpoints)
    unknown = sorted(set(endpoints) - set(known))
    if unknown:
        raise ValueError(f"unknown endpoints {unknown}; known: {known}")
    container = worker.config.parked_container
    total = skipped = 0
    for endpoint in endpoints:
        waiting = await account.queue(poison_queue(endpoint)).approximate_count()
        bar = Progress(f"replay {endpoint}", min(waiting, limit), enabled=progress)
        # One pass: what cannot be replayed stays hidden for the pass, so it is met once.
        report = await replay_report(account, endpoint, limit, container, step=bar.advance)
        bar.finish()
        for line in report.skipped:
            print(line)
        print(
            f"{endpoint}: replayed {report.replayed} poison messages"
            + (f", skipped {len(report.skipped)}" if report.skipped else "")
        )
        total += report.replayed
        skipped += len(report.skipped)
    print(f"replayed {total} messages" + (f", skipped {skipped}" if skipped else ""))
    return EXIT_OK


async def cleanup_command(worker: Worker, *, grace_seconds: float | None, wait: bool) -> int:
    print("cleanup: running one pass over every endpoint...", file=sys.stderr)
    report = await worker.cleanup(grace_seconds=grace_seconds, wait=wait)
    _print_json(report)
    leased = [t for t in report["tasks"] if t["skipped"] == "leased by another instance"]
    for task in leased:
        print(
            f"cleanup: {task['task']} is leased by another live instance "
            f"({task['leased_by']}); not cleaned in this pass, --wait waits for it",
            file=sys.stderr,
        )
    return EXIT_LEASED if leased else EXIT_OK
