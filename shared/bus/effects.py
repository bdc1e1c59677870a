"""Effects outside the bus (docs/effects.md): a handler's request to call a declared external
service, and the answer that comes back as a message.

A request is an ordinary command to the app's performer endpoint, so it is committed with the
requester's state and O(m) and performed only after that commit. Its idempotency key derives
from the incoming message id and the effect's position among the effects of that handler run,
never from an attempt id or a clock: every retry, duplicate copy, crash, redelivery and replay
of the same message names the same key.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from shared.bus.ids import derived_id
from shared.bus.messages import Command
from shared.errors import InvalidName

PERFORMER_ENDPOINT = "effects"
"""The bus-owned endpoint that performs the effects of the app's handlers."""

Outcome = Literal["succeeded", "failed", "uncertain"]
"""``succeeded``: the provider applied it (2xx); ``failed``: it refused it for good (4xx);
``uncertain``: an at-most-once call whose outcome is unknown, for the handler to reconcile."""

_SERVICE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")


def effect_key(incoming_id: str, position: int) -> str:
    """The idempotency key of the ``position``-th effect (from 1) requested while processing
    message ``incoming_id``."""
    return derived_id(incoming_id, "effect", position)


def check_service_name(kind: str, name: str) -> str:
    """A service or operation name as declared: 1-63 lowercase letters, digits, '_' or '-'."""
    if not isinstance(name, str) or not _SERVICE_NAME.fullmatch(name):
        raise InvalidName(
            f"invalid {kind} name {name!r}: use 1-63 lowercase letters, digits, '_' or '-', "
            "starting with a letter"
        )
    return name


class EffectRequest(Command):
    """A committed request to call ``service``'s ``operation`` with ``body`` under ``key``,
    answered by a message of type ``answer_type`` to ``reply_to``'s partition
    ``partition``. Partitioned by the key: each effect has its own performer state."""

    partition_by: ClassVar[str | None] = "key"
    key: str
    service: str
    operation: str
    body: dict[str, Any]
    answer_type: str
    reply_to: str
    partition: str


class EffectAnswered(Command):
    """Base of the answer types a handler names in ``request_effect``: the outcome of the
    effect ``key``, the provider's status and its (parsed, size-limited) body. Delivered to
    the requesting partition, so the handler records it in the state that asked."""

    partition_by: ClassVar[str | None] = "partition"
    partition: str
    key: str
    outcome: Outcome
    status: int
    body: dict[str, Any]
