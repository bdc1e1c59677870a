"""Sagas: long-running processes whose instances start, complete and time out
(``docs/sagas.md``).

A saga is an endpoint (token or processed_messages mode) whose partitions are its instances:
a message reaches the instance named by its partition key, which each type takes from its
correlation property (``Message.partition_by``) or, for a reply, from the instance that asked
(``REPLY_PARTITION_HEADER``). What the bus adds to an ordinary endpoint, all decided at the
receiver inside the round that commits (``Pipeline._run_at_state``):

- **Starting.** Only the types declared in ``started_by`` create an instance. Any other
  message for an instance that does not exist runs the endpoint's not-found handler for its
  type, if one is declared, and is otherwise acknowledged with outcome ``saga_not_found``; in
  both cases nothing of the instance is written, and the audit row says so.
- **Completing.** ``ctx.complete()`` ends the instance: in the same commit as the handler's
  outputs, its state is replaced by a marker that says when it completed (``SagaRow`` with
  ``completed_at``). Every later message for it, a starting one too, is ``saga_not_found``; the
  cleanup deletes the marker after ``BUS_SAGA_RETENTION_SECONDS``, after which the
  correlation value may start a new instance.
- **Timeouts.** ``ctx.request_timeout`` sends a delayed command to the saga itself and keeps
  its handle in the instance (``SagaRow.timeouts``); a timeout handled is dropped from the
  list, and completing cancels the ones still pending.

Why the marker and not a deleted row: a deleted row reads the same as an instance never
started, so a later starting message with the same correlation value (a client's retry with a
new key, a second publish of the same order) would start it again, and a late timeout would
find a fresh instance to act on. The marker is small (no business state), and a read-only
decision against it needs no write: a message judged ``saga_not_found`` commits its O(m) and
audit row alone, which serialises at the read of the instance, as any read does.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from shared.bus.state.base import StateRow
from shared.errors import CorruptRecord

SAGA_ROW_TYPE = "saga"
"""The ``type`` of a saga instance's state row: its data is a ``SagaRow``."""
REPLY_PARTITION_HEADER = "bus-reply-partition"
"""The header every message a saga sends carries: the instance (partition) that sent it, so
that ``ctx.reply`` at the receiver comes back to that instance whatever the reply's own
correlation property says."""


class PendingTimeout(BaseModel):
    """A timeout the instance requested and has not yet handled: the handle of the delayed
    command it sent itself (``MessageHandle``'s fields, kept as plain data so that the row
    does not depend on the handle's class) and when it is due."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    message_id: str
    type: str
    due: datetime | None
    handle: dict[str, Any]


class SagaRow(BaseModel):
    """What a saga instance's state row holds: the user's state, the timeouts it waits for,
    and, once completed, when (its state is then empty)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    state: dict[str, Any] | None = None
    timeouts: tuple[PendingTimeout, ...] = ()
    completed_at: datetime | None = None
    started_by: str = ""
    """The message id that started the instance."""

    @property
    def completed(self) -> bool:
        return self.completed_at is not None

    def to_json(self) -> str:
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def decode(cls, data: str, where: str) -> SagaRow:
        try:
            return cls.model_validate_json(data)
        except ValidationError as e:
            raise CorruptRecord(f"{where}: not a saga instance ({e.error_count()} errors)") from e


@dataclass
class SagaSpec:
    """How one endpoint runs as a saga: the types that start an instance and the handlers
    for messages that find none."""

    started_by: frozenset[str]
    """Current type names that create an instance."""
    not_found: dict[str, Any] = field(default_factory=dict)
    """Current type name -> handler run for a message that finds no instance."""


@dataclass
class SagaTurn:
    """What one message does at a saga, decided from the instance as read (R2): run a
    handler for the instance, run a not-found handler, or nothing (``saga_not_found``)."""

    role: Literal["instance", "not_found"]
    row: SagaRow | None
    """The instance as read; None when there is none (never started, or its marker retired)."""
    state: BaseModel
    """The state the handler sees: the instance's, a starting instance's default, or for a
    not-found handler a default that is never saved."""
    handler: Any = None
    """The not-found handler, or None to run the type's own (``instance``) or nothing."""

    @property
    def runs(self) -> bool:
        return self.role == "instance" or self.handler is not None

    def row_after(
        self,
        state: BaseModel,
        *,
        completed_at: datetime | None,
        message_id: str,
        requested: Sequence[PendingTimeout] = (),
        cancelled: Collection[str] = frozenset(),
    ) -> SagaRow:
        """The instance as message ``message_id`` leaves it: its new state and its pending
        timeouts (less the one it is, if it is one, and those it cancelled; plus those it
        requested), or the completed marker."""
        started_by = self.row.started_by if self.row is not None else message_id
        kept = () if self.row is None else self.row.timeouts
        gone = {message_id, *cancelled}
        timeouts = (*(t for t in kept if t.message_id not in gone), *requested)
        if completed_at is not None:
            return SagaRow(completed_at=completed_at, started_by=started_by)
        return SagaRow(
            state=state.model_dump(mode="json"), timeouts=timeouts, started_by=started_by
        )


def saga_turn(
    spec: SagaSpec,
    state_type: type[BaseModel],
    type_name: str,
    stored: StateRow | None,
    where: str,
) -> SagaTurn:
    """The turn a message of ``type_name`` (its current name) takes at the instance
    ``stored``. A state row written before the endpoint became a saga (its type is the state
    model's name) is a live instance with that state."""
    row = None if stored is None else instance_row(stored, where)
    if row is not None and not row.completed:
        return SagaTurn("instance", row, state_type.model_validate(row.state or {}))
    if row is None and type_name in spec.started_by:
        return SagaTurn("instance", None, state_type())
    return SagaTurn("not_found", row, state_type(), spec.not_found.get(type_name))


def instance_row(stored: StateRow, where: str) -> SagaRow:
    """The instance a saga's state row holds, as the receiver reads it: a ``SagaRow``, or a
    live instance with that state for a row written before the endpoint became a saga.
    CorruptRecord when it is neither (operators' views count it as unreadable)."""
    if stored.type == SAGA_ROW_TYPE:
        return SagaRow.decode(stored.data, where)
    try:
        return SagaRow(state=json.loads(stored.data))
    except (ValueError, ValidationError) as e:
        raise CorruptRecord(f"{where}: the state row is not JSON") from e
