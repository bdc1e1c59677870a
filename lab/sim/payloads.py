"""NoMissingPayload: no receiver meets a missing shared payload for a token it may still
process (``shared.bus.payloads``, ``shared.cleanup.payloads``).

The simulator wraps the account the bus uses with ``PayloadWatch``: when a read of the
payloads container finds nothing while the token of the signal being processed
(``lab.sim.variants.incoming_token``) still exists, the payload was removed while a token
that refers to it could still be processed. The existence check reads the unscheduled,
unfaulted account, so the watch adds no operation to any schedule. (A missing payload whose
token is gone is a duplicate signal of a message already processed: the receiver
acknowledges it, and that is no violation.)
"""

from __future__ import annotations

from lab.sim.invariants import NO_MISSING_PAYLOAD
from lab.sim.variants import incoming_token
from shared.errors import NotFound
from shared.stores.account import StorageAccount
from shared.stores.blob import Blob, BlobContainer
from shared.stores.delegating import DelegatingAccount, DelegatingBlobContainer

__all__ = ["NO_MISSING_PAYLOAD", "PayloadWatch", "payload_names"]


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


async def payload_names(account: StorageAccount, container: str) -> list[str]:
    """Every payload left (BoundedResidue)."""
    return [blob.name async for blob in account.blob_container(container).list()]
