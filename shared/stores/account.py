"""A storage account: the factory for the containers, tables and queues of one backend."""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self

from shared.stores.blob import BlobContainer
from shared.stores.queue import MessageQueue
from shared.stores.table import Table


class StorageAccount(abc.ABC):
    """Hands out store objects by name; names are checked against Azure's rules here."""

    @abc.abstractmethod
    def blob_container(self, name: str) -> BlobContainer:
        """The container called ``name`` (not created until ``create_if_missing``)."""

    @abc.abstractmethod
    def table(self, name: str) -> Table:
        """The table called ``name``."""

    @abc.abstractmethod
    def queue(self, name: str) -> MessageQueue:
        """The queue called ``name``."""

    async def close(self) -> None:  # noqa: B027 - optional hook; in-memory has nothing to free
        """Release network resources; the account cannot be used afterwards."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
