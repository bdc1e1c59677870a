"""State shared by every in-memory store handle of one account."""

from __future__ import annotations

import itertools
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
    _etags: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_etag(self) -> str:
        return f'"0x{next(self._etags):015X}"'
