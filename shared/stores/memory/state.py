"""State shared by every in-memory store handle of one account."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from shared.clock import Clock


@dataclass
class MemoryState:
    """Everything one in-memory account stores; guarded by ``lock``.

    A threading lock (not an asyncio one) so that stores shared between event loops or threads,
    as in the local host, stay consistent too.
    """

    clock: Clock
    lock: threading.RLock = field(default_factory=threading.RLock)
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)
    blob_names: dict[str, list[str]] = field(default_factory=dict)
    """Each container's blob names in order (``MemoryBlobContainer`` keeps it)."""
    tables: dict[str, dict[tuple[str, str], Any]] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    _etags: int = 0
    """The last ETag number given out."""

    def new_etag(self) -> str:
        self._etags += 1
        return f'"0x{self._etags:015X}"'

    def copy(self, clock: Clock) -> MemoryState:
        """An independent copy of everything stored, on ``clock``: a change to either is not
        seen by the other, and ETags go on from the same number in both. Stored items are
        immutable (blobs and queue messages are frozen, a row is replaced, never changed in
        place), so they are shared; only the containers holding them are copied."""
        with self.lock:
            return MemoryState(
                clock=clock,
                containers={name: dict(blobs) for name, blobs in self.containers.items()},
                blob_names={name: list(names) for name, names in self.blob_names.items()},
                tables={name: dict(rows) for name, rows in self.tables.items()},
                queues={name: dict(messages) for name, messages in self.queues.items()},
                _etags=self._etags,
            )
