"""The in-memory account: a factory of store handles over one shared state."""

from __future__ import annotations

from shared.clock import Clock, system_clock
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.memory.blob import MemoryBlobContainer
from shared.stores.memory.queue import MemoryQueue
from shared.stores.memory.state import MemoryState
from shared.stores.memory.table import MemoryTable
from shared.stores.names import check_container_name, check_queue_name, check_table_name
from shared.stores.queue import MessageQueue
from shared.stores.table import Table


class MemoryStorageAccount(StorageAccount):
    """An account living in this process. Handles of the same name see the same data."""

    def __init__(self, clock: Clock = system_clock) -> None:
        self.state = MemoryState(clock=clock)

    def copy(self, clock: Clock) -> MemoryStorageAccount:
        """Another account holding what this one holds now, on ``clock``, independent of this
        one from here on (``MemoryState.copy``): what a long set-up leaves behind, built once
        and copied for each use."""
        account = MemoryStorageAccount(clock)
        account.state = self.state.copy(clock)
        return account

    def blob_container(self, name: str) -> BlobContainer:
        return MemoryBlobContainer(self.state, check_container_name(name))

    def table(self, name: str) -> Table:
        return MemoryTable(self.state, check_table_name(name))

    def queue(self, name: str) -> MessageQueue:
        return MemoryQueue(self.state, check_queue_name(name))
