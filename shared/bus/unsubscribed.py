"""Events published to a topic that has no subscriber.

Publishing to an empty recipient list is legal (subscribers may come later) but the event
reaches nobody, so it is never silent: the first drop of a topic in a process is logged at
warning level, and every drop is counted in a small blob beside the topic's recipient list
(``unsubscribed/<topic>``, the count in its metadata) that ``bus status`` reads with one
listing. The count is telemetry, not part of the exactly-once protocol: it is updated before
the publisher's commit, so a handler run again after a conflict counts again, and a count
that cannot be updated (storage trouble, heavy contention) is logged and skipped rather than
failing the publisher.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from shared.bus.messages import check_topic
from shared.errors import (
    AlreadyExists,
    InvalidName,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
)
from shared.stores.blob import BlobContainer

log = logging.getLogger(__name__)

PREFIX = "unsubscribed/"
COUNT = "count"
MAX_CAS_ROUNDS = 5
MAX_COUNT_DIGITS = 18


def blob_name(topic: str) -> str:
    """Never a recipient list's name: those are ``<topic>.json`` and topics hold no '/'."""
    return f"{PREFIX}{check_topic(topic)}"


def parse_count(metadata: Mapping[str, str]) -> int:
    """The stored count; anything but a plain decimal (the blob is writable by any holder
    of the storage key) reads as 0 rather than failing the reader."""
    value = metadata.get(COUNT, "")
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value[:MAX_COUNT_DIGITS])
    return 0


class UnsubscribedEvents:
    """Records drops for one topics container; warns once per topic per instance (one per
    process and bus)."""

    def __init__(self, container: BlobContainer) -> None:
        self._container = container
        self._warned: set[str] = set()

    async def record(self, topic: str, type_name: str, publisher: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            log.warning(
                "%s published %s but topic %s has no subscriber: the event is dropped "
                "(counted in `bus status`; subscribe with `bus subscribe %s ENDPOINT` or "
                "`bus subscribe --all`)",
                publisher,
                type_name,
                topic,
                topic,
            )
        try:
            if not await self._increment(blob_name(topic)):
                log.warning("could not count a dropped %s: the count kept changing", type_name)
        except (StorageError, OutcomeUnknown, InvalidName) as e:
            log.warning("could not count a dropped %s: %s", type_name, e)

    async def _increment(self, name: str) -> bool:
        for _ in range(MAX_CAS_ROUNDS):
            try:
                properties = await self._container.get_properties(name)
            except NotFound:
                try:
                    await self._container.create(name, b"", {COUNT: "1"})
                    return True
                except AlreadyExists:
                    continue  # another publisher counted the first drop: add to it
            count = parse_count(properties.metadata) + 1
            try:
                await self._container.set_metadata(name, {COUNT: str(count)}, etag=properties.etag)
                return True
            except (PreconditionFailed, NotFound):
                continue
        return False


async def unsubscribed_counts(container: BlobContainer) -> dict[str, int]:
    """Topic -> events dropped for want of a subscriber, from one listing."""
    counts: dict[str, int] = {}
    async for blob in container.list(PREFIX):
        counts[blob.name[len(PREFIX) :]] = parse_count(blob.metadata)
    return counts
