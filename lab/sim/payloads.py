"""NoMissingPayload: no receiver meets a missing shared payload for a token it may still
process (``shared.bus.payloads``, ``shared.cleanup.payloads``). NoPayloadReadByCopies: an
invocation reads a shared payload only to run its handler; a copy of a message already
processed (a duplicate, or a signal copied by anyone with queue send) reads nothing of it.

The simulator wraps the account the bus uses with ``PayloadWatch``: when a read of the
payloads container finds nothing while the token of the signal being processed
(``lab.sim.variants.incoming_token``) still exists, the payload was removed while a token
that refers to it could still be processed. The existence check reads the unscheduled,
unfaulted account, so the watch adds no operation to any schedule. (A missing payload whose
token is gone is a duplicate signal of a message already processed: the receiver
acknowledges it, and that is no violation.)
"""

from __future__ import annotations

from lab.sim.invariants import NO_MISSING_PAYLOAD, NO_PAYLOAD_READ_BY_COPIES
from lab.sim.invocation import payload_read
from lab.sim.variants import incoming_token
from shared.errors import NotFound
from shared.stores.account import StorageAccount
from shared.stores.blob import Blob, BlobContainer
from shared.stores.delegating import DelegatingAccount, DelegatingBlobContainer

__all__ = [
    "NO_MISSING_PAYLOAD",
    "NO_PAYLOAD_READ_BY_COPIES",
    "PayloadReads",
    "PayloadWatch",
    "payload_names",
]


class PayloadWatch(DelegatingAccount):
    """The bus's account, watching the reads of ``payloads`` (see the module)."""

    def __init__(self, inner: StorageAccount, truth: StorageAccount, payloads: str) -> None:
        super().__init__(inner)
        self.truth = truth
        self.payloads = payloads
        self.missing: list[str] = []
        """What each read that met a missing payload for an existing token named."""

    def blob_container(self, name: str) -> BlobContainer:
        container = self.inner.blob_container(name)
        return _Watched(container, self) if name == self.payloads else container


class _Watched(DelegatingBlobContainer):
    def __init__(self, inner: BlobContainer, watch: PayloadWatch) -> None:
        super().__init__(inner)
        self.watch = watch

    async def read(self, name: str) -> Blob:
        try:
            return await super().read(name)
        except NotFound:
            await self._missing(name)
            raise

    async def _missing(self, name: str) -> None:
        where = incoming_token.get()
        if where is None:
            return
        container, token = where
        try:
            await self.watch.truth.blob_container(container).get_properties(token)
        except NotFound:
            return  # the token is gone too: a duplicate, acknowledged
        self.watch.missing.append(f"payload {name} is gone while token {token} exists")


class PayloadReads(DelegatingAccount):
    """Notes each read of the payloads container in the current invocation's record
    (``lab.sim.invocation``). Below any variant's wrapper, so that a variant's own reads
    count too."""

    def __init__(self, inner: StorageAccount, payloads: str) -> None:
        super().__init__(inner)
        self.payloads = payloads

    def blob_container(self, name: str) -> BlobContainer:
        container = self.inner.blob_container(name)
        return _Noted(container) if name == self.payloads else container


class _Noted(DelegatingBlobContainer):
    async def read(self, name: str) -> Blob:
        blob = await super().read(name)
        payload_read(name)
        return blob


async def payload_names(account: StorageAccount, container: str) -> list[str]:
    """Every payload left (BoundedResidue)."""
    return [blob.name async for blob in account.blob_container(container).list()]
