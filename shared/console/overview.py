"""The console's overview: each endpoint's figures, the recipient lists and the last audit.

Depths and poison counts are the queues' approximate counts, as ``bus status`` gives them;
tokens and delayed messages come from one listing of the tokens container, tallied by sender
as the cleanup's backlog tallies them (``shared.cleanup.backlog``), no token read (a token
names its sender, not its destination; a delayed one's metadata names its type and
destination); throughput and latency from the audit rows (``shared.console.throughput``); the
transactional sessions of each endpoint that takes them by state, from their records
(``shared.bus.session_counts``), bounded as the audit rows' look is, and each saga's instances
and ``saga_not_found`` messages (``shared.console.sagas``), bounded the same way; recipient
lists from the topics container; the last audit's verdict from what an audit of the account's
tables publishes (``shared.audit.published``).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from shared.audit.published import latest
from shared.bus.saga_counts import count_sagas
from shared.bus.session_counts import SessionCounts, count_sessions
from shared.bus.subscriptions import handled_topics
from shared.bus.topics import recipients_in
from shared.bus.unsubscribed import PREFIX as UNSUBSCRIBED_PREFIX
from shared.cleanup.backlog import SenderTokens, tokens_in_flight
from shared.console.sagas import saga_figures
from shared.console.throughput import Throughput, throughput
from shared.errors import CorruptRecord, NotFound
from shared.resources import poison_queue
from shared.runtime import Worker
from shared.stores.blob import BlobContainer

log = logging.getLogger(__name__)

TOPIC_SUFFIX = ".json"


def iso(moment: datetime | None) -> str | None:
    """A time as the console's answers give it: ISO 8601 in UTC."""
    return None if moment is None else moment.astimezone(UTC).isoformat(timespec="seconds")


async def overview(worker: Worker, now: datetime, scan_limit: int) -> dict[str, Any]:
    """GET /api/overview's answer (docs/console.md says what each figure counts)."""
    account, config = worker.account(), worker.config
    tokens = account.blob_container(config.tokens_container)
    try:
        senders = (await tokens_in_flight(tokens, now)).senders
    except NotFound:
        senders = {}
    names = worker.app.running_endpoints(worker.app_config.app_name)
    endpoints = await asyncio.gather(
        *(_endpoint(worker, name, senders.get(name), now, scan_limit) for name in names)
    )
    others = sorted(sender for sender in senders if sender not in names)
    return {
        "generated_at": iso(now),
        "endpoints": list(endpoints),
        "other_senders": [_sent(s, senders[s], now) for s in others],
        "recipients": await recipients(worker),
        "audit": await last_audit(worker),
    }


async def last_audit(worker: Worker) -> dict[str, Any] | None:
    """The verdict the last audit of the account's tables published
    (``shared.audit.published``); None when none did. One that cannot be read is shown as
    such, with why, rather than hidden."""
    try:
        published = await latest(worker.account().blob_container(worker.config.audits_container))
    except CorruptRecord as e:
        log.warning("console: the last audit's verdict is unreadable: %s", e)
        return {"at": None, "verdict": "UNREADABLE", "summary": str(e)}
    if published is None:
        return None
    return {"at": iso(published.at), "verdict": published.verdict, "summary": published.summary}


async def _endpoint(
    worker: Worker, name: str, sent: SenderTokens | None, now: datetime, scan_limit: int
) -> dict[str, Any]:
    depth, poisoned = await asyncio.gather(_count(worker, name), _count(worker, poison_queue(name)))
    rows = worker.endpoint_rows()[name]
    done = await throughput(rows, now, scan_limit)
    declared = worker.app.endpoints[name]
    sessions = await count_sessions(rows, scan_limit) if declared.sessions else None
    saga = None if declared.saga is None else await count_sagas(rows, scan_limit)
    return {
        "name": name,
        "mode": declared.mode,
        "store": declared.store,
        "queue_depth": depth,
        "poison_count": poisoned,
        **_sent(name, sent or SenderTokens(), now),
        **_throughput(done),
        "sessions": None if sessions is None else _sessions(worker, sessions, now),
        "saga": None if saga is None else saga_figures(worker, saga, now),
    }


def _sessions(worker: Worker, counts: SessionCounts, now: datetime) -> dict[str, Any]:
    """An endpoint's transactional sessions by state (``shared.bus.session_counts``), and how
    long after its commit the cleanup signals a waiting one."""
    since = counts.oldest_waiting_since
    return {
        "waiting": counts.waiting,
        "open": counts.open,
        "finished": counts.finished,
        "unreadable": counts.unreadable,
        "oldest_waiting_seconds": None if since is None else _age(now, since),
        "resend_after_seconds": worker.config.session_resend_seconds,
        "records_scanned": counts.scanned,
        "complete": counts.complete,
    }


def _age(now: datetime, since: datetime) -> float:
    return round(max((now - since).total_seconds(), 0.0), 1)


async def _count(worker: Worker, queue: str) -> int:
    try:
        return await worker.account().queue(queue).approximate_count()
    except NotFound:
        return 0


def _sent(sender: str, figures: SenderTokens, now: datetime) -> dict[str, Any]:
    """What ``sender`` has in flight: its tokens, the oldest's age, its delayed messages and
    the next few due, with the type and destination their tokens' metadata names (no token
    is read: a body may be megabytes, and the overview is refreshed every few seconds)."""
    due = figures.next_due()
    return {
        "sender": sender,
        "tokens_in_flight": figures.count,
        "tokens_received": figures.received,
        "oldest_token_age_seconds": None if figures.oldest is None else _age(now, figures.oldest),
        "delayed_count": figures.delayed,
        "next_due": [
            {
                "message_id": d.message_id,
                "type": d.type,
                "to": d.destination,
                "due_at": iso(d.due_at),
            }
            for d in due
        ],
    }


def _throughput(done: Throughput) -> dict[str, Any]:
    return {
        "processed_last_minutes": [
            {"minute": iso(minute), "count": count} for minute, count in done.per_minute
        ],
        "latency_ms": {"p50": done.p50_ms, "p95": done.p95_ms},
        "audit_rows_scanned": done.scanned,
        "throughput_complete": done.complete,
    }


async def recipients(worker: Worker) -> list[dict[str, Any]]:
    """Every topic's recipient list: those in the topics container, and the topics the app's
    endpoints handle that have none yet (empty). A list the bus did not write is shown with
    the problem, its subscribers empty."""
    container = worker.account().blob_container(worker.config.topics_container)
    lists: dict[str, dict[str, Any]] = {
        topic: {"topic": topic, "endpoints": []} for topic, _ in handled_topics(worker.app)
    }
    try:
        async for blob in container.list():
            if blob.name.startswith(UNSUBSCRIBED_PREFIX) or not blob.name.endswith(TOPIC_SUFFIX):
                continue
            topic = blob.name.removesuffix(TOPIC_SUFFIX)
            lists[topic] = await _recipient_list(container, topic, blob.name)
    except NotFound:
        pass
    return [lists[topic] for topic in sorted(lists)]


async def _recipient_list(container: BlobContainer, topic: str, name: str) -> dict[str, Any]:
    try:
        subscribers = recipients_in((await container.read(name)).data, name)
    except NotFound:
        subscribers = []
    except CorruptRecord as e:
        return {"topic": topic, "endpoints": [], "problem": str(e)}
    return {"topic": topic, "endpoints": sorted(subscribers)}
