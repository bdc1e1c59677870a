"""Effects outside the bus (docs/effects.md): a handler's request to call a declared external
service, and the answer that comes back as a message.

A request is an ordinary command to the app's performer endpoint, so it is committed with the
requester's state and O(m) and performed only after that commit. Its idempotency key derives
from the incoming message id and the effect's position among the effects of that handler run,
never from an attempt id or a clock: every retry, duplicate copy, crash, redelivery and replay
of the same message names the same key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from shared.bus.ids import derived_id
from shared.bus.messages import Command
from shared.errors import ConfigurationError, InvalidName, UndeclaredService
from shared.resources import PERFORMER

PERFORMER_ENDPOINT = PERFORMER
"""The bus-owned endpoint that performs the effects of an unnamed app's handlers; a named
app's is ``<name>effects`` (``shared.resources.performer_endpoint``, ``BusConfig``)."""

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


DEFAULT_CALL_SECONDS = 10.0
"""A call's timeout when its service declares none; capped below the queue's lease anyway."""
IN_PROGRESS_STATUSES = frozenset({409})
"""What a service answers, by default, while a call under the same key is still running:
409, as Stripe, Zuora and the IETF's Idempotency-Key draft do."""
KEY_REUSED_STATUSES = frozenset({422})
"""What a service answers, by default, for a key already used with another body: 422, as
Zuora and the IETF's Idempotency-Key draft do (Stripe answers 400, which it also answers
for any invalid request: ``docs/effects.md`` says what to declare)."""
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")
_PATH = re.compile(r"/[A-Za-z0-9._~/-]{0,255}")


@dataclass(frozen=True)
class ServiceDeclaration:
    """An external service the app's handlers may request effects of (``BusApp.service``).

    The declaration is code, reviewed with the app; where the service lives (its base address)
    and how to authenticate (its credential) are app settings read once at start-up, never a
    message's content. ``operations`` maps each operation's name to its path under the base
    address (a POST with the JSON body). ``at_most_once``: the service honours no idempotency
    key, so a call is never repeated after an unknown outcome (``docs/effects.md``, section 5).
    ``idempotency_header`` names the header that carries the key for a service that honours
    one (Stripe's ``Idempotency-Key`` by default). ``in_progress_statuses``: the 4xx
    statuses by which it says that a call under the same key is still running (retried with
    the same key); ``key_reused_statuses``: those by which it says that the key was used with
    another body (a defect: parked)."""

    name: str
    operations: Mapping[str, str]
    at_most_once: bool = False
    timeout_seconds: float = DEFAULT_CALL_SECONDS
    idempotency_header: str = "Idempotency-Key"
    in_progress_statuses: Collection[int] = IN_PROGRESS_STATUSES
    key_reused_statuses: Collection[int] = KEY_REUSED_STATUSES

    def __post_init__(self) -> None:
        check_service_name("service", self.name)
        if not self.operations:
            raise ConfigurationError(f"service {self.name}: declare at least one operation")
        for operation, path in self.operations.items():
            check_service_name("operation", operation)
            if not isinstance(path, str) or not _PATH.fullmatch(path) or "//" in path:
                raise ConfigurationError(
                    f"service {self.name}: operation {operation} needs a path such as "
                    f"'/v1/charges' (letters, digits and . _ ~ - /), not {path!r}"
                )
        timeout = self.timeout_seconds
        if not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout <= 0:
            raise ConfigurationError(
                f"service {self.name}: timeout_seconds must be a positive number: {timeout!r}"
            )
        if not _HEADER_NAME.fullmatch(self.idempotency_header):
            raise ConfigurationError(
                f"service {self.name}: {self.idempotency_header!r} is not a header name"
            )
        self._check_statuses()
        object.__setattr__(self, "operations", dict(self.operations))

    def _check_statuses(self) -> None:
        """The declared statuses as frozen sets; a status cannot mean both things."""
        in_progress = self._client_errors("in_progress_statuses")
        key_reused = self._client_errors("key_reused_statuses")
        both = in_progress & key_reused
        if both:
            raise ConfigurationError(
                f"service {self.name}: {sorted(both)} cannot mean both in progress and key reused"
            )
        object.__setattr__(self, "in_progress_statuses", in_progress)
        object.__setattr__(self, "key_reused_statuses", key_reused)

    def _client_errors(self, field: str) -> frozenset[int]:
        """The statuses of ``field``, each a 4xx: a 2xx is an answer, and a 5xx is retried
        with the same key already."""
        statuses: object = getattr(self, field)
        if isinstance(statuses, str | bytes) or not isinstance(statuses, Collection):
            raise ConfigurationError(f"service {self.name}: {field} must be a set of statuses")
        checked = frozenset(statuses)
        wrong = [s for s in checked if type(s) is not int or not 400 <= s < 500]
        if wrong:
            raise ConfigurationError(
                f"service {self.name}: {field} takes 4xx statuses only, not {wrong!r}"
            )
        return checked

    def path(self, operation: str) -> str:
        """The declared path of ``operation``; an undeclared one is refused."""
        try:
            return self.operations[operation]
        except KeyError:
            raise UndeclaredService(
                f"service {self.name} declares no operation {operation!r} "
                f"(it declares {sorted(self.operations)})"
            ) from None


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
    the requesting partition, so the handler records it in the state that asked. An
    ``uncertain`` answer carries status 0 and an empty body when the provider gave no answer
    (a timeout, a dropped connection, or a call not made because its marker was there)."""

    partition_by: ClassVar[str | None] = "partition"
    partition: str
    key: str
    outcome: Outcome
    status: int
    body: dict[str, Any]
