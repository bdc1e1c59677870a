"""What is left waiting once a cleanup pass is done: the parked messages of each endpoint and
the tokens still in flight, with the age of the oldest. The alerts watch these figures
(docs/alerts.md) and ``bus status`` shows the tokens.

Storage's own metrics give no per-queue depth, so the pass measures them itself, after its
tasks, so that what it removed is not counted:

- parked messages: one request per endpoint, the poison queue's approximate count;
- tokens in flight: a listing of the tokens container, 5,000 names a request, stopped after
  ``limit`` tokens (``CLEANUP_BACKLOG_MAX_TOKENS``) so that a large backlog cannot make every
  pass slow. A token's age counts from its last change, or for a delayed message from its due
  time (``since``): a message scheduled for next week is not late.

A token still in flight past the grace period is a message not yet processed: one waiting in
a queue that is backing up, one whose receiver keeps failing, or one parked (its token stays
until it is replayed or discarded). A claimed token is not in flight: its receiver has it. It
is counted apart as received: a token-mode receiver leaves its processed token for its
cleanup's next pass to delete (R7, ``shared.bus.receiver``), and a message parked after its
claim keeps its token too (the parked count says so).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.bus.envelope import TOKEN_NAME
from shared.bus.outgoing import DESTINATION_METADATA, DUE_METADATA, TYPE_METADATA
from shared.bus.telemetry import DESTINATION, SENDER, BusTelemetry
from shared.bus.unsubscribed import parse_time
from shared.cleanup.base import since
from shared.errors import NotFound
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer, BlobProperties

log = logging.getLogger(__name__)

LIST_PAGE = 5000
"""Names a listing request returns at most (the service's limit)."""


NEXT_DUE = 5
"""Delayed messages a tally keeps per sender, soonest first (the console lists them)."""


@dataclass(frozen=True, order=True)
class Due:
    """A delayed message: its token, its message id (from the token's name), its due time,
    and its type and destination when its token's metadata names them (no token is read)."""

    token: str
    message_id: str
    due_at: datetime
    type: str | None = None
    destination: str | None = None


@dataclass
class SenderTokens:
    """The tokens of one sender still in flight: how many, since when the oldest due one has
    waited, and the delayed ones (not due yet), with the soonest ``NEXT_DUE`` of them."""

    count: int = 0
    received: int = 0
    """Claimed tokens: received, so neither in flight nor late (not in ``count``)."""
    oldest: datetime | None = None
    """When the age of the oldest due token counts from (``since``); None when none is due."""
    delayed: int = 0
    soonest: list[tuple[float, Due]] = field(default_factory=list)
    """(minus due timestamp, the delayed message) of the soonest delayed ones: a heap whose
    top is the latest of them, dropped when a sooner one comes."""

    def add(self, blob: BlobProperties, now: datetime) -> None:
        if blob.metadata.get("claim"):
            self.received += 1
            return
        self.count += 1
        due = parse_time(blob.metadata, DUE_METADATA)
        if due is not None and due > now:  # a delayed message, not due yet: not late
            self.delayed += 1
            named = TOKEN_NAME.fullmatch(blob.name)
            message_id = named["out"] if named else ""
            labels = (blob.metadata.get(TYPE_METADATA), blob.metadata.get(DESTINATION_METADATA))
            self._keep((-due.timestamp(), Due(blob.name, message_id, due, *labels)))
            return
        counts_from = since(blob)
        if self.oldest is None or counts_from < self.oldest:
            self.oldest = counts_from

    def merge(self, other: SenderTokens) -> None:
        """Count ``other``'s tokens in this tally too."""
        self.count += other.count
        self.received += other.received
        self.delayed += other.delayed
        if other.oldest is not None and (self.oldest is None or other.oldest < self.oldest):
            self.oldest = other.oldest
        for entry in other.soonest:
            self._keep(entry)

    def _keep(self, entry: tuple[float, Due]) -> None:
        if len(self.soonest) < NEXT_DUE:
            heapq.heappush(self.soonest, entry)
        else:
            heapq.heappushpop(self.soonest, entry)

    def next_due(self) -> list[Due]:
        """The soonest delayed messages, soonest first."""
        return [due for _, due in sorted(self.soonest, reverse=True)]

    def age_seconds(self, now: datetime) -> float:
        """How long the oldest due token has waited; 0 when none is due."""
        return 0.0 if self.oldest is None else max((now - self.oldest).total_seconds(), 0.0)


@dataclass(frozen=True)
class TokensInFlight:
    """The tokens container's listing, tallied by sender (the first segment of a name)."""

    senders: dict[str, SenderTokens]
    complete: bool
    """False when the listing stopped at its limit: the counts are lower bounds then, and
    the senders listed after the cut (names sort by sender) are missing."""

    @property
    def total(self) -> int:
        return sum(tokens.count for tokens in self.senders.values())

    def grouped(self, endpoints: Collection[str], outside: str) -> dict[str, SenderTokens]:
        """The tally with one entry per endpoint (empty ones too) and every other sender
        (the HTTP ingress, the CLI, a bulk send, a name nobody expects) folded into
        ``outside``: a bounded set of keys, whatever names the container holds."""
        grouped = {name: SenderTokens() for name in (*endpoints, outside)}
        for sender, tokens in self.senders.items():
            grouped[sender if sender in endpoints else outside].merge(tokens)
        return grouped


async def tokens_in_flight(
    tokens: BlobContainer, now: datetime, limit: int | None = None
) -> TokensInFlight:
    """Every token in ``tokens`` (the first ``limit`` by name when given), by sender, listed
    ``LIST_PAGE`` names a request and never more than the limit needs. Raises NotFound when
    the container is missing."""
    senders: dict[str, SenderTokens] = {}
    listed, continuation = 0, None
    while True:
        wanted = LIST_PAGE if limit is None else min(LIST_PAGE, limit - listed + 1)
        page = await tokens.list_page(page_size=wanted, continuation=continuation)
        for blob in page.items:
            if listed == limit:  # one more than the limit was asked for: there are more
                return TokensInFlight(senders, complete=False)
            listed += 1
            sender = blob.name.split("/", 1)[0]
            senders.setdefault(sender, SenderTokens()).add(blob, now)
        if page.continuation is None:
            return TokensInFlight(senders, complete=True)
        continuation = page.continuation


async def parked_counts(account: StorageAccount, endpoints: Iterable[str]) -> dict[str, int]:
    """Each endpoint's parked messages: its poison queue's approximate count (0 when that
    queue does not exist: the Functions host creates it with the first message it parks)."""
    counts: dict[str, int] = {}
    for endpoint in endpoints:
        try:
            counts[endpoint] = await account.queue(poison_queue(endpoint)).approximate_count()
        except NotFound:
            counts[endpoint] = 0
    return counts


OUTSIDE = "(outside)"
"""The sender every token not sent by one of the app's endpoints is counted under: the HTTP
ingress's, the CLI's, a bulk send's (and any other name found in the container)."""


@dataclass(frozen=True)
class Backlog:
    """What a pass left waiting, when it looked."""

    measured_at: datetime
    parked: dict[str, int]
    """Parked messages by endpoint."""
    tokens: dict[str, SenderTokens] | None
    """Tokens in flight by sender: each endpoint, and ``OUTSIDE``. None when not counted
    (a limit of 0)."""
    tokens_complete: bool = True
    """False when the listing stopped at its limit (``TokensInFlight.complete``)."""

    def to_dict(self) -> dict[str, Any]:
        """The ``backlog`` of ``bus cleanup --json``."""
        tokens = self.tokens or {}
        return {
            "measured_at": self.measured_at.isoformat(),
            "parked": dict(sorted(self.parked.items())),
            "tokens_counted": self.tokens is not None,
            "tokens_complete": self.tokens_complete,
            "tokens_in_flight": {sender: counted.count for sender, counted in tokens.items()},
            "oldest_token_age_seconds": {
                sender: round(counted.age_seconds(self.measured_at), 3)
                for sender, counted in tokens.items()
            },
        }


async def measure_backlog(
    account: StorageAccount,
    endpoints: Collection[str],
    tokens_container: str,
    now: datetime,
    max_tokens: int,
) -> Backlog:
    """Parked messages by endpoint, and tokens in flight by sender (at most ``max_tokens``
    listed; none when 0). Raises the storage's errors: the caller decides what a failed
    measurement means."""
    parked = await parked_counts(account, endpoints)
    if max_tokens == 0:
        return Backlog(now, parked, None)
    try:
        listed = await tokens_in_flight(account.blob_container(tokens_container), now, max_tokens)
    except NotFound:
        listed = TokensInFlight({}, complete=True)  # no container, so no token in flight
    if not listed.complete:
        log.warning(
            "backlog: more than %d tokens in flight (CLEANUP_BACKLOG_MAX_TOKENS); counted the "
            "first %d by name, so the counts and the oldest age are lower bounds",
            max_tokens,
            max_tokens,
        )
    return Backlog(now, parked, listed.grouped(endpoints, OUTSIDE), listed.complete)


def record(telemetry: BusTelemetry, backlog: Backlog) -> None:
    """Set the backlog gauges (``BusTelemetry``) to what ``backlog`` found: every endpoint
    and sender gets a value, 0 included, so none keeps a figure an earlier pass measured."""
    for endpoint, count in backlog.parked.items():
        telemetry.parked.set(count, {DESTINATION: endpoint})
    for sender, counted in (backlog.tokens or {}).items():
        attributes = {SENDER: sender}
        telemetry.tokens_in_flight.set(counted.count, attributes)
        telemetry.oldest_token_age.set(counted.age_seconds(backlog.measured_at), attributes)
