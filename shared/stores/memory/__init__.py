"""In-memory backend: the same contract as Azure, enforced under a lock, for fast tests and
the simulator."""

from shared.stores.memory.account import MemoryStorageAccount

__all__ = ["MemoryStorageAccount"]
