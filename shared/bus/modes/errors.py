"""Errors specific to the non-token endpoint modes."""

from __future__ import annotations

from shared.errors import BusError


class NondeterministicHandler(BusError):
    """State-based mode: a duplicate replayed on the restored state did not reproduce the
    committed run. The committed outputs stand (they are the ones sent, once); the handler
    reads something outside its state, message and context (the wall clock, ``uuid4()``,
    ``random`` without ``ctx.random()``, mutable globals) and must be fixed."""

    def __init__(self, endpoint: str, message_id: str, differences: list[str]) -> None:
        super().__init__(
            f"endpoint {endpoint}: handler is not deterministic: replaying duplicate of "
            f"message {message_id} on its restored state differs from the committed run: "
            + "; ".join(differences)
        )
        self.endpoint = endpoint
        self.message_id = message_id
        self.differences = differences


class EntityOutboxFull(BusError):
    """Entity-outbox mode: the state entity with this message's outbox entry would exceed a
    Table Storage limit. Nothing was written; the message goes back to the host (and, after
    its retries, to the poison queue with its token kept, so it can be replayed once the
    outbox map has been trimmed by ``expire_entity_outboxes`` or the state made smaller)."""
