"""The markers of at-most-once effects (``docs/effects.md``, section 5).

A service that honours no idempotency key must not be called twice for one effect: not by two
racing performer copies, not by a retry after an unknown outcome, not by an operator's replay
of a parked request. Before calling it, the performer inserts the effect's marker, insert-if-
absent and outside its handler's commit (the call happens before that commit, so the marker
must be durable before the call whatever the round's fate). Only the copy whose insert
succeeds calls; every other finds the marker and answers ``uncertain`` without calling.

The markers are rows of a table the bus owns: the performer endpoint's own table, under the
effect's key as partition (the performer's state partition of that request) and a row key of
their own, beside the partition's state and outbox rows, which nothing confuses them with.
Both the in-memory account and Azure give tables, so one implementation serves both, and the
table contract makes them behave alike (``tests/contract/test_marker_contract.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from shared.bus.effects import PERFORMER_ENDPOINT
from shared.errors import AlreadyExists, NotFound
from shared.stores.account import StorageAccount
from shared.stores.table import Entity, Table

MARKER_ROW = "at-most-once"
"""The row key of a marker, in the partition of its effect's key."""


class EffectMarkers:
    """The at-most-once markers kept in ``table``, or in the table ``table`` gives when first
    needed (a worker opens its storage account on first use, after the app is wired)."""

    def __init__(self, table: Table | Callable[[], Table]) -> None:
        self._table = table

    @property
    def table(self) -> Table:
        if callable(self._table):
            self._table = self._table()
        return self._table

    async def mark(self, key: str, *, request_id: str, at: datetime) -> bool:
        """Insert the marker of effect ``key`` if it is absent. True: this caller inserted it
        and is the one that may call; False: it was already there (a racing copy, an earlier
        attempt, a replay), so the call may have happened and must not be made again.

        A write whose outcome is unknown raises (OutcomeUnknown): the marker may exist, so the
        caller must not call; its retry finds the marker, or inserts it."""
        marker = Entity(key, MARKER_ROW, {"request_id": request_id, "marked_at": at})
        try:
            await self.table.insert(marker)
        except AlreadyExists:
            return False
        return True

    async def marked(self, key: str) -> bool:
        """Whether effect ``key`` has a marker."""
        try:
            await self.table.get(key, MARKER_ROW)
        except NotFound:
            return False
        return True


def performer_markers(account: StorageAccount | Callable[[], StorageAccount]) -> EffectMarkers:
    """The markers of the app's performer: in its endpoint's table, which every app that
    declares services provisions with the performer endpoint; of ``account``, or of the
    account it gives when the first marker is needed."""
    if callable(account):
        opened = account
        return EffectMarkers(lambda: opened().table(PERFORMER_ENDPOINT))
    return EffectMarkers(account.table(PERFORMER_ENDPOINT))
