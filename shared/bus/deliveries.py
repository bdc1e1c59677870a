"""The signals a record keeps for the deliveries its round committed, and how it stores them.

O(m), the ingress record, the window modes' dedup rows and the entity outbox's entries list
the signals their round committed: R6 sends them (again when resumed from the record) and
the cleanup reads their attempt ids and token names. The first format stored each signal
whole, a JSON object with its destination, token name, partition key and type: about 560
bytes of UTF-16 per delivery with short names, so a table entity listed about 1,700.

The compact format (``FORMAT``) stores what the deliveries of one output share once, and per
delivery only what differs::

    {"v": 2, "outputs": [{"tokens": "<sender>/<incoming id>", "type": "<type>",
                          "pk": "<partition key>", "index": <output index>,
                          "due": "<ISO time, delayed outputs only>",
                          "to": [["<destination>", "<attempt id>", "<digest>"], ...]}]}

The message id is not stored: ``plan_deliveries`` derives it as ``derived_id(incoming id,
"out", index, destination)``, and the encoder checks that for every delivery; one whose id
is not derived so keeps it as a fourth element, and a signal whose token name does not split
so (a name from before digests) is kept whole under ``"signal"``. About 210 bytes a delivery
with short names. Readers take both formats: a record outlives the code that wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from shared.bus.envelope import TOKEN_NAME
from shared.bus.ids import derived_id
from shared.errors import CorruptRecord
from shared.logsafe import problems

if TYPE_CHECKING:
    from shared.bus.envelope import Envelope

FORMAT = 2
INDEX_SEARCH = 64
"""Output indexes tried past the previous delivery's when deriving a message id: outputs in
between had no delivery (an event nobody subscribes to). Past it, the id is stored."""


class OutgoingSignal(BaseModel):
    """One committed outgoing message: where it goes and which token carries it.

    The envelope itself lives in the token, which keeps the outbox record small."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    destination: str
    message_id: str
    attempt_id: str
    token: str
    partition_key: str
    type: str
    deliver_at: datetime | None = None
    """A delayed message's due time, so that R6 (also when resumed from the stored record)
    sends its signal hidden until then. Left out of the stored form when absent."""

    @model_validator(mode="before")
    @classmethod
    def _ids_from_token_name(cls, data: Any) -> Any:
        """Stored forms leave out the ids their token name already holds (see below)."""
        if isinstance(data, dict) and not {"message_id", "attempt_id"} <= data.keys():
            match = TOKEN_NAME.fullmatch(str(data.get("token", "")))
            if match is not None:
                return {"message_id": match["out"], "attempt_id": match["attempt"], **data}
        return data

    @model_serializer(mode="wrap")
    def _without_ids_in_token_name(self, handler: SerializerFunctionWrapHandler) -> Any:
        """The first format's entry: the message and attempt ids are segments of the token's
        name, and storing them twice would cost a third of it."""
        data = handler(self)
        match = TOKEN_NAME.fullmatch(self.token)
        if match is not None and (match["out"], match["attempt"]) == (
            self.message_id,
            self.attempt_id,
        ):
            del data["message_id"], data["attempt_id"]
        if self.deliver_at is None:
            data.pop("deliver_at", None)
        else:  # stored with json.dumps, which takes no datetime
            data["deliver_at"] = self.deliver_at.isoformat()
        return data

    @classmethod
    def for_token(cls, envelope: Envelope, attempt_id: str, token: str) -> OutgoingSignal:
        """The signal for ``token``, created for ``envelope`` under ``attempt_id``."""
        return cls(
            destination=envelope.destination,
            message_id=envelope.id,
            attempt_id=attempt_id,
            token=token,
            partition_key=envelope.partition_key,
            type=envelope.type,
            deliver_at=envelope.deliver_at,
        )


def signals_value(outgoing: Sequence[OutgoingSignal]) -> dict[str, Any]:
    """``outgoing`` in the compact format, as a JSON value (for records that nest it)."""
    outputs: list[dict[str, Any]] = []
    index = 0
    for signal in outgoing:
        match = TOKEN_NAME.fullmatch(signal.token)
        if (
            match is None
            or match["digest"] is None
            or (match["out"], match["attempt"]) != (signal.message_id, signal.attempt_id)
        ):
            outputs.append({"signal": signal.model_dump()})
            continue
        delivery = [signal.destination, signal.attempt_id, match["digest"]]
        found = _output_index(match["incoming"], signal, index)
        if found is None:
            delivery.append(signal.message_id)
        else:
            index = found
        head = _head(f"{match['sender']}/{match['incoming']}", signal, index)
        last = outputs[-1] if outputs else {}
        if "to" in last and {k: v for k, v in last.items() if k != "to"} == head:
            last["to"].append(delivery)
        else:
            outputs.append({**head, "to": [delivery]})
    return {"v": FORMAT, "outputs": outputs}


def encode_signals(outgoing: Sequence[OutgoingSignal]) -> str:
    """``outgoing`` as the compact format's JSON text."""
    return json.dumps(signals_value(outgoing), separators=(",", ":"))


def first_format(outgoing: Sequence[OutgoingSignal]) -> str:
    """``outgoing`` as the first format's JSON text: what the previous version reads, for the
    one record whose rollout needs it (``shared.bus.ingress``)."""
    return json.dumps([signal.model_dump() for signal in outgoing])


def _output_index(incoming_id: str, signal: OutgoingSignal, start: int) -> int | None:
    for index in range(start, start + INDEX_SEARCH):
        if derived_id(incoming_id, "out", index, signal.destination) == signal.message_id:
            return index
    return None


def _head(tokens: str, signal: OutgoingSignal, index: int) -> dict[str, Any]:
    head: dict[str, Any] = {
        "tokens": tokens,
        "type": signal.type,
        "pk": signal.partition_key,
        "index": index,
    }
    if signal.deliver_at is not None:
        head["due"] = signal.deliver_at.isoformat()
    return head


class _Output(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: str
    type: str
    pk: str
    index: int = Field(ge=0)
    due: datetime | None = None
    to: list[tuple[str, str, str] | tuple[str, str, str, str]]


class _Whole(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    signal: OutgoingSignal


class _Stored(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    v: Literal[2]
    outputs: list[_Output | _Whole]


def decode_signals(text: str) -> tuple[OutgoingSignal, ...]:
    """The signals a record's JSON text lists, in either format; CorruptRecord saying why
    when it is neither (a format newer than this version reads included)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise CorruptRecord("a record's signals are not JSON") from None
    return signals_of(value)


def signals_of(value: object) -> tuple[OutgoingSignal, ...]:
    """The signals of a JSON value in either format (``decode_signals``)."""
    try:
        if isinstance(value, list):  # the first format
            return tuple(OutgoingSignal.model_validate(entry) for entry in value)
        if isinstance(value, dict) and isinstance(value.get("v"), int) and value["v"] > FORMAT:
            raise CorruptRecord(
                f"a record's signals are in format {value['v']}, newer than this version "
                f"reads ({FORMAT}): it was written by a newer version of the bus"
            )
        stored = _Stored.model_validate(value)
    except ValidationError as e:
        raise CorruptRecord(f"a record's signals: {problems(e, 'signals')}") from None
    return tuple(signal for output in stored.outputs for signal in _expanded(output))


def _expanded(output: _Output | _Whole) -> list[OutgoingSignal]:
    if isinstance(output, _Whole):
        return [output.signal]
    signals = []
    for destination, attempt_id, digest, *stored_id in output.to:
        incoming_id = output.tokens.rpartition("/")[2]
        message_id = (
            stored_id[0] if stored_id else derived_id(incoming_id, "out", output.index, destination)
        )
        token = f"{output.tokens}/{attempt_id}/{message_id}/{digest}"
        if not TOKEN_NAME.fullmatch(token):
            raise CorruptRecord(f"a record's signal names {token[:200]!r}: not a token name")
        signals.append(
            OutgoingSignal(
                destination=destination,
                message_id=message_id,
                attempt_id=attempt_id,
                token=token,
                partition_key=output.pk,
                type=output.type,
                deliver_at=output.due,
            )
        )
    return signals
