"""Topic recipient lists: one JSON blob per topic, changed only by ETag compare-and-swap."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from shared.bus.messages import check_topic
from shared.bus.unsubscribed import UnsubscribedEvents
from shared.clock import Clock
from shared.errors import (
    AlreadyExists,
    ConflictRetriesExhausted,
    CorruptRecord,
    NotFound,
    PreconditionFailed,
)
from shared.logsafe import shown
from shared.resources import check_endpoint_name
from shared.stores.blob import BlobContainer

log = logging.getLogger(__name__)
MAX_CAS_ROUNDS = 20


def blob_name(topic: str) -> str:
    return f"{check_topic(topic)}.json"


def recipients_in(data: bytes, name: str) -> list[str]:
    """The subscribers a recipient-list blob names. Anyone with write access to the container
    can put anything there: what the bus did not write is a CorruptRecord naming the blob,
    never a crash of the worker reading it."""
    try:
        subscribers = json.loads(data)["subscribers"]
    except (ValueError, TypeError, KeyError):
        subscribers = None
    if not isinstance(subscribers, list) or not all(isinstance(s, str) for s in subscribers):
        raise CorruptRecord(
            f"topic recipient list {shown(name)} is not the bus's JSON "
            '({"topic": ..., "subscribers": [endpoint names]}): delete that blob, then run '
            "`bus subscribe --all`"
        )
    return subscribers


class RecipientLists:
    """Reads are cached for ``cache_seconds`` per process (0 disables the cache): a new
    subscriber starts receiving events at most that long after subscribing."""

    def __init__(self, container: BlobContainer, clock: Clock, cache_seconds: float = 5.0) -> None:
        self._container = container
        self._clock = clock
        self._cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, tuple[str, ...]]] = {}
        self.unsubscribed = UnsubscribedEvents(container, clock)
        """Publishes that found no subscriber: warned once per topic and counted."""

    async def subscribers(self, topic: str) -> tuple[str, ...]:
        cached = self._cache.get(topic)
        now = self._clock()
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        try:
            blob = await self._container.read(blob_name(topic))
            subscribers = tuple(recipients_in(blob.data, blob_name(topic)))
        except NotFound:
            subscribers = ()
        self._cache[topic] = (now, subscribers)
        return subscribers

    async def subscribe(self, topic: str, endpoint: str) -> bool:
        """Add ``endpoint``; returns False if it was already subscribed (idempotent)."""
        check_endpoint_name(endpoint)
        return await self._change(topic, lambda s: s | {endpoint})

    async def unsubscribe(self, topic: str, endpoint: str) -> bool:
        """Remove ``endpoint``; returns False if it was not subscribed (idempotent)."""
        return await self._change(topic, lambda s: s - {endpoint})

    async def _change(self, topic: str, change: Callable[[set[str]], set[str]]) -> bool:
        name = blob_name(topic)
        for _ in range(MAX_CAS_ROUNDS):
            try:
                blob = await self._container.read(name)
                current = set(recipients_in(blob.data, name))
                etag: str | None = blob.etag
            except NotFound:
                current, etag = set(), None
            wanted = change(set(current))
            if wanted == current:
                return False
            data = json.dumps({"topic": topic, "subscribers": sorted(wanted)}).encode()
            write: Awaitable[str]
            if etag is None:
                write = self._container.create(name, data)
            else:
                write = self._container.upload(name, data, etag=etag)
            try:
                await write
            except (AlreadyExists, PreconditionFailed):
                continue  # someone else changed the list first: re-read and re-apply
            self._cache.pop(topic, None)
            log.info("topic %s subscribers now %s", topic, sorted(wanted))
            return True
        raise ConflictRetriesExhausted(
            f"could not update topic {topic} after {MAX_CAS_ROUNDS} tries"
        )
