"""The markers of at-most-once effects (``docs/effects.md``, section 5).

A service that honours no idempotency key must not be called twice for one effect: not by two
racing performer copies, not by a retry after an unknown outcome, not by an operator's replay
of a parked request. Before calling it, the performer inserts the effect's marker, insert-if-
absent and outside its handler's commit (the call happens before that commit, so the marker
must be durable before the call whatever the round's fate). Only the copy whose insert
succeeds calls; every other finds the marker and answers ``uncertain`` without calling.

The markers are rows of the performer endpoint, under the effect's key as partition (the
performer's state partition of that request) and a row key of their own, beside the
partition's state and outbox rows, which nothing confuses them with. They are written and
read through the performer's ``EndpointRows`` (``shared.bus.state.rows``), the one interface
to an endpoint's rows, through which the cleanup retires them too
(``shared.cleanup.markers``); the contract suite holds every implementation to the same
insert-if-absent rule (``tests/contract/test_marker_contract.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from shared.bus.effects import PERFORMER_ENDPOINT
from shared.bus.state.rows import EndpointRows, TableRows
from shared.errors import AlreadyExists, NotFound
from shared.stores.account import StorageAccount
from shared.stores.table import Entity

MARKER_ROW = "at-most-once"
"""The row key of a marker, in the partition of its effect's key."""


class EffectMarkers:
    """The at-most-once markers kept in the performer's ``rows``, or in the rows ``rows``
    gives when first needed (a worker opens its storage account on first use, after the app
    is wired)."""

    def __init__(self, rows: EndpointRows | Callable[[], EndpointRows]) -> None:
        self._rows = rows

    @property
    def rows(self) -> EndpointRows:
        if callable(self._rows):
            self._rows = self._rows()
        return self._rows

    async def mark(self, key: str, *, request_id: str, at: datetime) -> bool:
        """Insert the marker of effect ``key`` if it is absent. True: this caller inserted it
        and is the one that may call; False: it was already there (a racing copy, an earlier
        attempt, a replay), so the call may have happened and must not be made again.

        A write whose outcome is unknown raises (OutcomeUnknown): the marker may exist, so the
        caller must not call; its retry finds the marker, or inserts it."""
        marker = Entity(key, MARKER_ROW, {"request_id": request_id, "marked_at": at})
        try:
            await self.rows.insert(marker)
        except AlreadyExists:
            return False
        return True

    async def marked(self, key: str) -> bool:
        """Whether effect ``key`` has a marker."""
        try:
            await self.rows.get(key, MARKER_ROW)
        except NotFound:
            return False
        return True


def performer_markers(
    account: StorageAccount | Callable[[], StorageAccount], performer: str = PERFORMER_ENDPOINT
) -> EffectMarkers:
    """The markers of the app's performer: in its endpoint's rows, which are always in its
    table (the performer is the bus's own endpoint, on Table Storage), provisioned by every
    app that declares services; of ``account``, or of the account it gives when the first
    marker is needed."""
    if callable(account):
        opened = account
        return EffectMarkers(lambda: TableRows(opened().table(performer)))
    return EffectMarkers(TableRows(account.table(performer)))
