"""Events published to a topic that has no subscriber.

Publishing to an empty recipient list is legal (subscribers may come later) but the event
reaches nobody, so it is never silent: the first drop of a topic in a process is logged at
warning level with the fix (``subscribe_hint``), and every drop is counted in a small blob
beside the topic's recipient list (``unsubscribed/<topic>``; in its metadata the count and the
times of the first and the last drop, ISO-8601 UTC) that ``bus status`` and the audit read
with one listing. The record is telemetry, not part of the exactly-once protocol: it is
updated before the publisher's commit, so a handler run again after a conflict counts again,
and a record that cannot be updated (storage trouble, heavy contention) is logged and skipped
rather than failing the publisher.

The metadata is writable by anyone with access to the container, so it is read defensively:
a count that is not a plain decimal reads as 0, a time that is not an ISO-8601 time with its
offset reads as unknown, and a blob whose name is no topic is left out; the reader never
fails on them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from shared.bus.messages import check_topic
from shared.clock import Clock, to_datetime
from shared.errors import (
    AlreadyExists,
    InvalidName,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
)
from shared.logsafe import shown
from shared.stores.blob import BlobContainer

log = logging.getLogger(__name__)

PREFIX = "unsubscribed/"
COUNT = "count"
FIRST = "first"
LAST = "last"
MAX_CAS_ROUNDS = 5
MAX_COUNT_DIGITS = 18
MAX_TIME_CHARS = 40
"""Longer than any ISO-8601 time ``datetime.isoformat`` writes."""


@dataclass(frozen=True)
class TopicDrops:
    """What the record of one topic says: events dropped, and when the first and the last
    were (None: unknown, as for a record written before times were kept, or damaged)."""

    topic: str
    count: int
    first: datetime | None
    last: datetime | None


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


def parse_time(metadata: Mapping[str, str], key: str) -> datetime | None:
    """The time stored under ``key``, in UTC; anything but an ISO-8601 time with its offset
    reads as unknown (None) rather than failing the reader."""
    value = metadata.get(key)
    if not isinstance(value, str) or not value.isascii() or len(value) > MAX_TIME_CHARS:
        return None
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.astimezone(UTC) if parsed.tzinfo is not None else None
    except (ValueError, OverflowError):  # OverflowError: an offset past year 1 or 9999
        return None


def parse_drops(topic: str, metadata: Mapping[str, str]) -> TopicDrops:
    return TopicDrops(
        topic, parse_count(metadata), parse_time(metadata, FIRST), parse_time(metadata, LAST)
    )


def subscribe_hint(topic: str, takers: Sequence[str]) -> str:
    """How to stop dropping the events of ``topic``, naming only commands the CLI accepts
    there: ``bus subscribe TOPIC ENDPOINT`` is refused for an endpoint that takes no event of
    the topic, so it is offered only for ``takers`` (``Routes.takers_of``)."""
    if takers:
        commands = " and ".join(f"`bus subscribe {topic} {name}`" for name in takers)
        verbs = "takes these events but is" if len(takers) == 1 else "take these events but are"
        return f"{', '.join(takers)} {verbs} not subscribed: run {commands}"
    return (
        f"no endpoint of this app takes the events of topic {topic}: add a handler for them "
        "to an endpoint (or declare the endpoint of another app that takes them with "
        "app.external_endpoint), deploy the app (`bus provision` creates a new endpoint's "
        "queues and table), then run `bus subscribe --all` (or `bus subscribe "
        f"{topic} ENDPOINT` for the other app's endpoint); if nobody needs them, stop "
        "publishing them"
    )


class UnsubscribedEvents:
    """Records drops for one topics container; warns once per topic per instance (one per
    process and bus)."""

    def __init__(self, container: BlobContainer, clock: Clock) -> None:
        self._container = container
        self._clock = clock
        self._warned: set[str] = set()

    async def record(
        self, topic: str, type_name: str, publisher: str, takers: Sequence[str]
    ) -> None:
        """Count one dropped event of ``topic``; ``takers`` are the endpoints that could
        subscribe to it, for the warning's fix."""
        if topic not in self._warned:
            self._warned.add(topic)
            log.warning(
                "%s published %s but topic %s has no subscriber: the event is dropped "
                "(counted in `bus status` and the audit); %s",
                publisher,
                type_name,
                topic,
                subscribe_hint(topic, takers),
            )
        try:
            if not await self._increment(blob_name(topic)):
                log.warning("could not count a dropped %s: the count kept changing", type_name)
        except (StorageError, OutcomeUnknown, InvalidName) as e:
            log.warning("could not count a dropped %s: %s", type_name, e)

    async def _increment(self, name: str) -> bool:
        for _ in range(MAX_CAS_ROUNDS):
            now = to_datetime(self._clock()).isoformat()
            try:
                properties = await self._container.get_properties(name)
            except NotFound:
                try:
                    await self._container.create(name, b"", {COUNT: "1", FIRST: now, LAST: now})
                    return True
                except AlreadyExists:
                    continue  # another publisher counted the first drop: add to it
            metadata = _counted(properties.metadata, now)
            try:
                await self._container.set_metadata(name, metadata, etag=properties.etag)
                return True
            except (PreconditionFailed, NotFound):
                continue
        return False


def _counted(metadata: Mapping[str, str], now: str) -> dict[str, str]:
    """The metadata after one more drop at ``now``: a first time that cannot be read (a
    record older than the times, or damaged) stays unknown rather than becoming ``now``."""
    counted = {COUNT: str(parse_count(metadata) + 1), LAST: now}
    first = parse_time(metadata, FIRST)
    if first is not None:
        counted[FIRST] = first.isoformat()
    return counted


async def unsubscribed_drops(container: BlobContainer) -> list[TopicDrops]:
    """Every topic's record of events dropped for want of a subscriber, by topic, from one
    listing; a blob there whose name is no topic is left out with a warning."""
    drops: list[TopicDrops] = []
    async for blob in container.list(PREFIX):
        topic = blob.name[len(PREFIX) :]
        try:
            check_topic(topic)
        except InvalidName:
            log.warning("ignoring %s: not the record of a topic", shown(blob.name))
            continue
        drops.append(parse_drops(topic, blob.metadata))
    return sorted(drops, key=lambda d: d.topic)


async def unsubscribed_counts(container: BlobContainer) -> dict[str, int]:
    """Topic -> events dropped for want of a subscriber."""
    return {d.topic: d.count for d in await unsubscribed_drops(container)}
