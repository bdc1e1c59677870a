"""The console's failed messages: every parked message listed (paged, filtered), grouped as
``bus poison list --group`` groups them, and one of them whole, as ``bus poison show`` shows
it (``shared.bus.poison_view``). Nothing here takes a message: it is looked at."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.bus.parked_body import BodyDownload, body_download
from shared.bus.parked_groups import poison_groups
from shared.bus.poison_view import ParkedView, find_parked, view
from shared.console.parked import Entries, ParkedQueues
from shared.runtime import Worker
from shared.stores.account import StorageAccount
from shared.stores.queue import QueueMessage

MAX_PAGE = 500
DEFAULT_PAGE = 50
BODY_PREFIX_CHARS = 16 * 1024
"""How much of a body one message's view answers: the page shows a prefix and its full size,
and offers the whole body as a download of its own (``GET /api/failed/<endpoint>/<id>/body``)."""


def listed_message(entry: dict[str, Any]) -> dict[str, Any]:
    """One parked message as ``GET /api/failed`` lists it."""
    return {
        "endpoint": entry["endpoint"],
        "id": entry["queue_message_id"],
        "message_id": entry["message_id"],
        "type": entry["message_type"],
        "error_type": entry["error_type"],
        "reason": entry["reason"],
        "parked_at": entry["parked_at"],
        "dequeue_count": entry["dequeue_count"],
    }


async def every_entry(parked: ParkedQueues, endpoints: list[str], *, fresh: bool) -> Entries:
    """Every parked message of ``endpoints``, endpoint by endpoint, each in id order (read
    afresh, or as a recent pass found them: ``ParkedQueues.entries``); complete when every
    endpoint's pass was."""
    found = await asyncio.gather(*(parked.entries(endpoint, fresh=fresh) for endpoint in endpoints))
    return Entries(
        [entry for one in found for entry in one.entries], all(one.complete for one in found)
    )


def matching(
    entries: list[dict[str, Any]], message_type: str | None, error_type: str | None
) -> list[dict[str, Any]]:
    """The entries of this type and error type (None: any; an empty text: those without)."""
    return [
        e
        for e in entries
        if _is(e["message_type"], message_type) and _is(e["error_type"], error_type)
    ]


def _is(value: str | None, wanted: str | None) -> bool:
    return wanted is None or value == (wanted or None)


def groups(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``GET /api/failed/groups``: the contract's names for ``poison_groups``."""
    return [
        {
            "endpoint": g["endpoint"],
            "type": g["message_type"],
            "error_type": g["error_type"],
            "count": g["count"],
            "example_reason": g["example_reason"],
        }
        for g in poison_groups(entries)
    ]


async def parked_message(
    worker: Worker, parked: ParkedQueues, endpoint: str, queue_message_id: str
) -> dict[str, Any] | None:
    """One parked message, its body cut to a prefix, or None when it is no longer parked."""
    seen = await parked_view(worker, parked, endpoint, queue_message_id)
    return None if seen is None else described(seen)


async def parked_body(
    worker: Worker, parked: ParkedQueues, endpoint: str, queue_message_id: str
) -> BodyDownload | None:
    """One parked message's body whole, checked and ready to stream
    (``shared.bus.parked_body``); None when it is no longer parked. Raises BodyWithheld when
    its body is missing or altered."""
    account, config = worker.account(), worker.config
    async with parked.passing(endpoint):
        found = await _found(account, endpoint, queue_message_id)
        if found is None:
            return None
        return await body_download(
            account,
            endpoint,
            found,
            tokens=config.tokens_container,
            parked=config.parked_container,
            payloads=config.payloads_container,
        )


async def _found(
    account: StorageAccount, endpoint: str, queue_message_id: str
) -> QueueMessage | None:
    found = await find_parked(account, endpoint, queue_message_id)
    return next((m for m in found if m.id == queue_message_id), None)


async def parked_view(
    worker: Worker, parked: ParkedQueues, endpoint: str, queue_message_id: str
) -> ParkedView | None:
    account, config = worker.account(), worker.config
    async with parked.passing(endpoint):
        message = await _found(account, endpoint, queue_message_id)
        if message is None:
            return None
        seen = await view(
            account,
            endpoint,
            message,
            tokens=config.tokens_container,
            parked=config.parked_container,
            payloads=config.payloads_container,
        )
    return seen


def described(seen: ParkedView) -> dict[str, Any]:
    """``GET /api/failed/<endpoint>/<id>``'s answer from the view ``bus poison show`` prints."""
    record, envelope = seen.record, seen.envelope
    headers = envelope.get("headers")
    if not isinstance(headers, dict):
        headers = {}
    return {
        "endpoint": seen.endpoint,
        "id": seen.queue_message_id,
        "message_id": record.message_id,
        "type": envelope.get("type") or record.message_type,
        "headers": {str(k): str(v) for k, v in headers.items()}
        if isinstance(headers, dict)
        else {},
        "body": (seen.body.text or "")[:BODY_PREFIX_CHARS],
        "body_chars": len(seen.body.text or ""),
        "body_state": seen.body.state,
        "body_note": seen.body.note,
        "reason": record.reason,
        "error_type": record.error_type,
        "dequeue_count": record.dequeue_count,
        "parked_at": seen.parked_at or None,
        "expires_at": seen.expires_at,
        "form": seen.form,
        "problem": seen.problem,
        "token": seen.token,
        "envelope": {k: v for k, v in envelope.items() if k != "headers"},
        "history": history(seen),
    }


def history(seen: ParkedView) -> list[dict[str, str | None]]:
    """What is known of the message's deliveries, oldest first."""
    record = seen.record
    tries = f" after {record.dequeue_count} tries" if record.dequeue_count else ""
    error = f": {record.error_type}" if record.error_type else ""
    steps: list[dict[str, str | None]] = []
    if seen.envelope.get("created_at"):
        steps.append({"at": str(seen.envelope["created_at"]), "what": "sent"})
    if record.enqueued_at:
        steps.append({"at": record.enqueued_at, "what": "queued for its first try"})
    if record.failed_at:
        steps.append({"at": record.failed_at, "what": f"last failure{tries}{error}"})
    steps.append({"at": seen.parked_at or None, "what": f"parked ({seen.form})"})
    if seen.looked_at:
        steps.append({"at": None, "what": f"looked at {seen.looked_at} times since it was parked"})
    return steps
