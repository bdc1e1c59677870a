"""A parked message read for an operator (``bus poison show``): what its wrapper says, its
signal, and its body read where it lives, without changing anything.

The wrapper is read through ``shared.bus.poison`` (``unwrap`` for what it holds, ``read_poison``
for what it says about itself). The body of a signal is the envelope in its token: the token is
read, and its bytes are checked against the digest in the token's name, so an altered token is
reported as altered, never shown as what the sender wrote. When the token is gone (processed,
or removed by the cleanup) the signal's own envelope copy is shown if the token's name proves
it is the token's content; otherwise the body is reported missing. Text that is not a signal
(refused, or moved by the Functions host) is shown as the parked text it is.

Finding a message only looks (``shared.bus.parked_pass``): the first ``PEEK_LIMIT`` messages
of a poison queue are peeked; deeper ones are received for ``LOOK_SECONDS`` and made visible
again at the end of the look, so nothing stays hidden for longer than the look and nothing is
deleted.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from shared.bus.envelope import TOKEN_NAME, Envelope, Signal, envelope_digest
from shared.bus.parked_pass import look_through
from shared.bus.payloads import resolve
from shared.bus.poison import PoisonRecord, Unreadable, read_poison, unwrap
from shared.errors import MalformedSignal, NewerVersion, NotFound, PayloadAltered, PayloadMissing
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.queue import QueueMessage


@dataclass(frozen=True)
class Body:
    """A parked message's body as found, and where: ``state`` is ``shown`` (``text`` is the
    sender's), ``excerpt`` or ``parked text`` (``text`` is what was refused, not a body),
    ``missing`` or ``altered`` (no ``text``: ``note`` says why)."""

    state: str
    note: str
    text: str | None = None


@dataclass(frozen=True)
class ParkedView:
    """One poison message as ``bus poison show`` shows it."""

    endpoint: str
    queue_message_id: str
    parked_at: str
    expires_at: str | None
    """None: it never expires (parked by the bus, or re-parked by the cleanup)."""
    looked_at: int
    """How often the poison message itself was received (by replays or looks)."""
    form: str
    record: PoisonRecord
    body: Body
    problem: str | None = None
    """Why the wrapper cannot be unwrapped (damaged or forged): nothing in it is followed."""
    signal: dict[str, Any] = field(default_factory=dict)
    envelope: dict[str, Any] = field(default_factory=dict)
    """The envelope's fields but its body, once the body was read and trusted."""
    token: str | None = None
    """The token's state: ``unclaimed``, ``claimed``, ``gone``, or None (no signal)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def find_parked(account: StorageAccount, endpoint: str, wanted: str) -> list[QueueMessage]:
    """The poison messages of ``endpoint`` whose bus message id, or queue message id, is
    ``wanted``: peeked, then looked for deeper (each hidden for ``LOOK_SECONDS`` at most, for
    one pass of at most ``PASS_SECONDS``). Only the messages found are kept."""
    queue = account.queue(poison_queue(endpoint))
    found = await look_through(queue, lambda m: m if _is(m, wanted) else None, limit=None)
    return found.kept


def _is(message: QueueMessage, wanted: str) -> bool:
    return message.id == wanted or read_poison(message.content).message_id == wanted


async def view(
    account: StorageAccount,
    endpoint: str,
    message: QueueMessage,
    *,
    tokens: str,
    parked: str,
    payloads: str,
) -> ParkedView:
    """What ``message`` of ``endpoint``'s poison queue holds, read from the tokens container
    ``tokens``, the parked-originals container ``parked`` and, for a body its token shares
    with other deliveries, the payloads container ``payloads``; nothing is written."""
    seen = ParkedView(
        endpoint=endpoint,
        queue_message_id=message.id,
        parked_at=_utc(message.inserted_on) or "",
        expires_at=_utc(message.expires_on),
        looked_at=message.dequeue_count,
        form="unreadable",
        record=read_poison(message.content),
        body=Body("missing", "not read"),
    )
    try:
        poisoned = unwrap(message.content, endpoint)
    except Unreadable as e:
        return replace(
            seen, body=Body("missing", f"its wrapper cannot be read: {e}"), problem=str(e)
        )
    except NewerVersion as e:
        return replace(seen, body=Body("missing", "not read: " + str(e)), problem=str(e))
    if poisoned.excerpt_only:
        excerpt = str(poisoned.info.get("excerpt", ""))
        note = f"only the first {len(excerpt)} of {seen.record.chars or '?'} characters were kept"
        return replace(seen, form="excerpt", body=Body("excerpt", note, excerpt))
    if poisoned.original is None:
        form = "inline" if poisoned.info else "moved by the host"
        seen = replace(seen, form=form)
        return await _from_signal(account, poisoned.signal or "", (tokens, payloads), seen)
    seen = replace(seen, form="reference")
    try:
        blob = await account.blob_container(parked).read(poisoned.original)
        raw = blob.data.decode("utf-8")
    except NotFound:
        why = f"its original {poisoned.original} is not in container {parked}"
        return replace(seen, body=Body("missing", why))
    except UnicodeDecodeError:
        return replace(seen, body=Body("missing", f"its original {poisoned.original} is not UTF-8"))
    return await _from_signal(account, raw, (tokens, payloads), seen)


def _utc(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat(timespec="seconds")


async def _from_signal(
    account: StorageAccount, raw: str, containers: tuple[str, str], seen: ParkedView
) -> ParkedView:
    """``seen`` with the signal ``raw``, its token's state and its body as found
    (``containers``: the tokens and the payloads container)."""
    tokens, payloads = containers
    try:
        signal = Signal.parse(raw)
    except (MalformedSignal, RecursionError) as e:
        note = f"the parked text is not a signal ({e}): shown as it was parked"
        return replace(seen, body=Body("parked text", note, pretty(raw)))
    except NewerVersion as e:
        note = f"not read: {e}; shown as it was parked"
        return replace(seen, body=Body("parked text", note, pretty(raw)), problem=str(e))
    fields = signal.model_dump(exclude_none=True, exclude={"envelope"})
    try:
        blob = await account.blob_container(tokens).read(signal.token)
    except NotFound:
        copy = signal.bound_envelope_copy()
        if copy is None:
            why = (
                f"its token {signal.token} is gone (processed, or removed by the cleanup) and "
                "the signal carries no copy its name proves: the body is kept nowhere else"
            )
            return replace(seen, signal=fields, token="gone", body=Body("missing", why))
        found = await _trusted(
            account.blob_container(payloads),
            signal,
            copy.encode("utf-8"),
            "the signal's copy of the envelope",
        )
        return replace(seen, signal=fields, token="gone", **found)
    state = "claimed" if blob.metadata.get("claim") else "unclaimed"
    found = await _trusted(
        account.blob_container(payloads), signal, blob.data, f"token {signal.token}"
    )
    return replace(seen, signal=fields, token=state, **found)


async def _trusted(
    payloads: BlobContainer, signal: Signal, data: bytes, where: str
) -> dict[str, Any]:
    """The body and envelope fields of ``data`` if it is the signal's message as sent (its
    shared payload read from ``payloads`` and checked, if it has one), else the body marked
    altered or missing."""
    digest = TOKEN_NAME.fullmatch(signal.token)
    named = None if digest is None else digest["digest"]
    if named is not None and named != envelope_digest(data):
        why = f"{where} does not match the digest in its name: altered since it was sent"
        return {"body": Body("altered", why)}
    try:
        envelope = Envelope.from_bytes(data)
    except ValueError:
        return {"body": Body("altered", f"{where} does not hold an envelope")}
    if envelope.id != signal.message_id or envelope.partition_key != signal.partition_key:
        return {"body": Body("altered", f"{where} holds another message than the signal names")}
    unchecked = "" if named is not None else " (unchecked: its name has no digest)"
    fields = envelope.model_dump(mode="json", exclude={"body"})
    if envelope.payload is not None:
        try:
            envelope = await resolve(payloads, signal.token, envelope)
        except PayloadMissing as e:
            return {"body": Body("missing", str(e)), "envelope": fields}
        except PayloadAltered as e:
            return {"body": Body("altered", str(e)), "envelope": fields}
        where = f"{where} and its shared payload"
    text = json.dumps(envelope.body, indent=2, ensure_ascii=False)
    return {"body": Body("shown", f"read from {where}{unchecked}", text), "envelope": fields}


def pretty(text: str) -> str:
    """``text`` as indented JSON when it is JSON, else as it is."""
    with contextlib.suppress(ValueError, RecursionError):
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    return text
