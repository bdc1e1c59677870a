"""A fingerprint of a run's trace that is the same for every order of its independent events.

Two schedules that differ only in the order of adjacent independent events (operations of
different processes on different resources, or two reads of one resource) are equivalent
(Mazurkiewicz traces): each resource sees the same requests in the same order, each process
the same results, so they end in the same state up to the names of ETags, ids and receipts.
A trace is determined by its projections, so the fingerprint combines:

- per process, its own events in order (operations with their faults, its stall, its end);
- per resource (a blob container, a table, a queue, the SQL database), the events on it in
  order, where a run of consecutive reads counts as a set (reads commute with each other);
- per segment between global events (time passing, a cleanup pass while everything is quiet,
  stalled processes resuming), which order against everything: the fingerprint chains the
  segments in order.

Each projection is a hash chain updated per event, and the fingerprint of the current segment
is the sum of one hash per projection, updated when a projection changes, so an event costs a
few tuple hashes whatever the length of the run. Hashes are Python's own (salted per process):
fingerprints compare within one process only, which is all a search needs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

_MASK = (1 << 64) - 1


class TraceFingerprint:
    def __init__(self) -> None:
        self._chains: dict[Hashable, tuple[int, int, int]] = {}
        """Projection -> (hash chain of its ordered events, sum of the reads since the last
        ordered event, the projection's term of ``_sum``)."""
        self._sum = 0
        """Sum of hash((projection, chain, reads)) over the projections of this segment."""
        self._segments = 0
        """Hash chain of the finished segments and the global events between them."""

    def _touch(self, projection: Hashable, event: Hashable, read: bool) -> None:
        old = self._chains.get(projection)
        if old is None:
            chain, reads = 0, 0
        else:
            chain, reads, term = old
            self._sum -= term
        if read:
            reads = (reads + hash(event)) & _MASK
        else:
            chain = hash((chain, reads, event))
            reads = 0
        term = hash((projection, chain, reads))
        self._chains[projection] = (chain, reads, term)
        self._sum += term

    def operation(
        self, process: str, locations: Iterable[tuple[str, bool]], event: Hashable
    ) -> None:
        """``process`` performs ``event`` (unique within the run: it names the process and
        the event's number there), reading (True) or changing (False) each of ``locations``
        (see ``locations``)."""
        self._touch(("process", process), event, read=False)
        for location, read in locations:
            self._touch(("resource", location), event, read=read)

    def local(self, process: str, event: Hashable) -> None:
        """An event that only ``process`` sees (its stall, its end)."""
        self._touch(("process", process), event, read=False)

    def barrier(self, event: Hashable) -> None:
        """A global event: ordered after everything before it and before everything after."""
        self._segments = hash((self._segments, self._sum & _MASK, event))
        self._chains.clear()
        self._sum = 0

    def digest(self) -> int:
        return hash((self._segments, self._sum & _MASK))


CONTAINER_WIDE = frozenset(
    {"blob.list", "table.query", "table.transact", "sql.query", "sql.transact"}
)
"""Operations on many items of a container, table or partition at once."""


def locations(kind: str, target: str, read: bool) -> list[tuple[str, bool]]:
    """The locations an operation reads (True) or changes (False), such that two operations
    depend on each other exactly when they share a location that one of them changes.

    An item (a blob, a table row, an SQL row) is a location of its own. Its container has two
    more: ``writes``, which every item write reads and every container-wide operation (a
    listing, a query, a batch) changes, and ``reads``, which every item read reads and every
    container-wide write changes. So writes to different items commute, and a listing or a
    batch orders against every item operation it may see or change. Tables count as one
    container (a partition query orders against every row of the table: coarser than needed,
    never finer). Queue operations all change their whole queue.
    """
    family = kind.partition(".")[0]
    container, _, item = target.partition("/")
    if family == "queue":
        return [(f"queue:{container}", False)]
    base = f"{family}:{container}"
    if kind in CONTAINER_WIDE or not item:
        if read:
            return [(f"{base} writes", False)]
        return [(f"{base} writes", False), (f"{base} reads", False)]
    if read:
        return [(f"{base} reads", True), (f"{base}/{item}", True)]
    return [(f"{base} writes", True), (f"{base}/{item}", False)]
