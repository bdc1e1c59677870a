"""Poison-queue handling: the poison messages' wire format (written here, read here), parking
a message with why, reading it back, and replaying it. The CLI (``bus poison list``,
``bus replay``), the bulk replay and the audit read poison messages only through this module.

A poison message takes one of four forms:

- ``{"poison": {...why...}, "signal": raw}``: the original message verbatim beside why it was
  parked (the pipeline's refusals, and the last error once deliveries are exhausted);
- ``{"poison": {...why..., "original": "<endpoint>/<id>"}}``: the same for a signal too large
  to be parked whole beside its reason that names a token that exists; the original is kept in
  the parked-originals blob container (``parked`` in infra/resources.json), replay fetches it
  from there and deletes it once the poison message is gone;
- ``{"poison": {...why..., "excerpt": prefix, "sha256": hex, "chars": n}}``: a refused text
  too large to be parked beside its reason that names no token (not a signal, oversized,
  malformed, or naming a token that does not exist): only its first ``EXCERPT_CHARS``
  characters, the SHA-256 of its UTF-8 bytes and its length are kept. No token holds such a
  message, so nothing is lost, and whoever may only send to a queue can never make the bus
  write a blob. It does not replay (the replay skips it and says why);
- anything else: a raw signal, as the Functions host moves it after ``maxDequeueCount``.

Every poison message the bus writes is sent with no expiry (time-to-live -1): a parked
message waits for its operator however long that takes. The Functions host's own moves get the
queue's default of seven days; the cleanup re-parks those with no expiry well before then
(``shared.cleanup.parked``), and removes parked originals no poison message refers to.

Replaying sends the original signal back to the endpoint's queue; its token was kept, so it is
processed exactly once. Poison-queue contents are not trusted: a damaged wrapper or a reference
outside ``<endpoint>/<uuid>`` is skipped and reported, never followed.

Two readings of one content: ``unwrap``, strict, for replay (what to send back, or why not),
and ``read_poison``, lenient, for listing and selecting (whatever the content says about
itself, never an error).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import uuid
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.bus.envelope import Signal
from shared.bus.formats import JSON_FIELD, NEWEST, json_version, stated
from shared.bus.parked_pass import walk
from shared.errors import CorruptRecord, MalformedSignal, NewerVersion, NotFound, TooLarge
from shared.resources import poison_queue
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.queue import MessageQueue, QueueMessage

DEFAULT_PARKED_CONTAINER = "parked"
"""Name of the parked-originals container when the configuration names none."""
MAX_REASON_CHARS = 2000
"""A reason longer than this is cut: it is for a person to read, and it must leave room."""
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
HOST_MOVED_REASON = "failed maxDequeueCount times (moved by the host)"
NEVER_EXPIRES = -1
"""The time-to-live every poison message is sent with: it stays until it is replayed."""
EXCERPT_CHARS = 1024
"""How much of a refused text that names no token is kept (with its digest and length). With a
reason of at most ``MAX_REASON_CHARS`` the excerpt form always fits in a queue message, even
with every character escaped in JSON."""


@dataclass(frozen=True)
class Reason:
    """Why a message was parked, with what is known about it.

    ``enqueued_at`` is when the queue message was inserted (its first try followed; a
    replayed message counts from its replay), ``failed_at`` when the failure that parked it
    happened: the first and the last failure bound the ``dequeue_count`` tries. Both are
    ISO 8601 times in UTC, to the second, or None when unknown."""

    endpoint: str
    reason: str
    dequeue_count: int
    error_type: str | None = None
    message_id: str | None = None
    message_type: str | None = None
    enqueued_at: str | None = None
    failed_at: str | None = None

    def as_json(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if v is not None}
        data["reason"] = self.reason[:MAX_REASON_CHARS]
        return data


def utc_time(moment: datetime | None) -> str | None:
    """``moment`` as a ``Reason`` keeps it: ISO 8601 in UTC, to the second (a time without a
    zone is taken as UTC, as the Functions host gives it)."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def error_reason(
    endpoint: str,
    error: BaseException,
    dequeue_count: int,
    *,
    message_id: str | None = None,
    message_type: str | None = None,
    enqueued_at: datetime | None = None,
    failed_at: datetime | None = None,
) -> Reason:
    """The reason for a message whose last delivery failed with ``error``."""
    return Reason(
        endpoint,
        f"{type(error).__name__}: {error}",
        dequeue_count,
        error_type=type(error).__name__,
        message_id=message_id,
        message_type=message_type,
        enqueued_at=utc_time(enqueued_at),
        failed_at=utc_time(failed_at),
    )


def _wrapper(version: int, fields: dict[str, Any]) -> str:
    """A poison wrapper of format ``version`` (``shared.bus.formats``): ``v`` first."""
    v = stated(version)
    return json.dumps(fields if v is None else {JSON_FIELD: v, **fields})


def poison_body(raw: str, reason: Reason, *, version: int = NEWEST) -> str:
    """The original message verbatim beside why it was parked (the inline form)."""
    return _wrapper(version, {"poison": reason.as_json(), "signal": raw})


def parked_name(endpoint: str) -> str:
    """A fresh name in the parked-originals container for a message of ``endpoint``."""
    return f"{endpoint}/{uuid.uuid4()}"


def reference_body(reason: Reason, original: str, *, version: int = NEWEST) -> str:
    """Why a message was parked, naming the blob ``original`` that keeps it (the by-reference
    form, for a signal too large to be parked whole beside its reason)."""
    return _wrapper(version, {"poison": {**reason.as_json(), "original": original}})


def excerpt_body(raw: str, reason: Reason, *, version: int = NEWEST) -> str:
    """Why a text that names no token was refused, with its first ``EXCERPT_CHARS``
    characters, the SHA-256 of its UTF-8 bytes and its length (the excerpt form)."""
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()
    excerpt = {"excerpt": raw[:EXCERPT_CHARS], "sha256": digest, "chars": len(raw)}
    return _wrapper(version, {"poison": {**reason.as_json(), **excerpt}})


async def names_a_token(tokens: BlobContainer, raw: str) -> bool:
    """True when ``raw`` is a signal whose token exists in ``tokens``: a message that must
    stay replayable whole, its token waiting for it."""
    try:
        signal = Signal.parse(raw)
    except (MalformedSignal, NewerVersion, RecursionError):
        return False  # a newer signal cannot be judged: no blob on its word
    try:
        await tokens.get_properties(signal.token)
    except NotFound:
        return False
    return True


async def park(
    account: StorageAccount,
    raw: str,
    reason: Reason,
    container: str,
    *,
    tokens: BlobContainer | None = None,
    version: int = NEWEST,
) -> str:
    """Put ``raw`` in its endpoint's poison queue with ``reason``, with no expiry, in a wrapper
    of format ``version``; returns the form used (``inline``, ``reference`` or ``excerpt``).

    A message that does not fit beside its reason (a queue message holds 64 KiB encoded) is
    kept whole in ``container``, the poison message pointing to it, only when it is a signal
    naming a token that exists in ``tokens``: its token waits for it, so it must replay. Such a
    blob is at most a signal long, and only a writer of tokens can cause one. Anything else
    too large (refused before any token is involved: not a signal, oversized, malformed, or
    naming no token) is parked as an excerpt and a digest: a sender who may only write to a
    queue leaves no blob behind. Either way nothing is retried forever for want of room."""
    queue = account.queue(poison_queue(reason.endpoint))
    try:
        await queue.send(poison_body(raw, reason, version=version), time_to_live=NEVER_EXPIRES)
        return "inline"
    except TooLarge:
        pass
    if tokens is None or not await names_a_token(tokens, raw):
        await queue.send(excerpt_body(raw, reason, version=version), time_to_live=NEVER_EXPIRES)
        return "excerpt"
    name = parked_name(reason.endpoint)
    # The reason travels in the poison message; the metadata copy helps whoever lists blobs.
    note = "".join(c if c.isascii() and c.isprintable() else "?" for c in reason.reason)
    await account.blob_container(container).upload(
        name, raw.encode("utf-8"), {"endpoint": reason.endpoint, "reason": note[:1024]}
    )
    await queue.send(reference_body(reason, name, version=version), time_to_live=NEVER_EXPIRES)
    return "reference"


async def repark(
    account: StorageAccount, endpoint: str, content: str, *, version: int = NEWEST
) -> str:
    """Send a poison message's ``content``, as it was found in ``endpoint``'s poison queue,
    to that queue again with no expiry (the cleanup does it for entries that would expire);
    returns ``copy``, or ``excerpt`` for a text too large to be sent again as it is (the host
    moves what it was given, perhaps not base64: such a text is too large to be a signal, so
    no token waits for it; its wrapper is of format ``version``). No blob is written: a copy
    refers to the same parked original, if any."""
    queue = account.queue(poison_queue(endpoint))
    try:
        await queue.send(content, time_to_live=NEVER_EXPIRES)
        return "copy"
    except TooLarge:
        pass
    why = Reason(endpoint, f"{HOST_MOVED_REASON}; too large to be a signal", 0)
    await queue.send(excerpt_body(content, why, version=version), time_to_live=NEVER_EXPIRES)
    return "excerpt"


class Unreadable(CorruptRecord, ValueError):
    """A poison message that cannot be unwrapped to something to replay."""


@dataclass(frozen=True)
class PoisonedMessage:
    signal: str | None
    """The original signal, or None when it is kept in a blob (``original``)."""
    reason: str
    original: str | None = None
    """Name of the blob in the parked-originals container holding the original."""
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def excerpt_only(self) -> bool:
        """Only an excerpt and a digest were kept (a refused text that named no token):
        nothing to replay."""
        return self.signal is None and self.original is None

    @property
    def message_id(self) -> str | None:
        """The parked message's id: its signal's when the signal parses, else the one its
        reason names (None when neither does)."""
        named = _named(self.info.get("message_id"))
        if self.signal is not None:
            with contextlib.suppress(MalformedSignal, NewerVersion):
                return Signal.parse(self.signal).message_id
        return named

    @property
    def message_type(self) -> str | None:
        """The parked message's type as its reason names it, if it does."""
        return _named(self.info.get("message_type"))


def _named(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def unwrap(content: str, endpoint: str | None = None) -> PoisonedMessage:
    """What a poison message holds. Raises Unreadable for a wrapper that is damaged, or a
    reference that is not ``<endpoint>/<uuid>`` (never followed: it could name any blob), and
    NewerVersion for a wrapper of a newer format (an upgraded version reads it)."""
    data = _json_object(content)
    if data is None or "poison" not in data:
        return PoisonedMessage(content, HOST_MOVED_REASON)
    json_version(data, "poison wrapper", Unreadable)
    data.pop(JSON_FIELD, None)
    info = data["poison"]
    if not isinstance(info, dict):
        raise Unreadable("its 'poison' field is not an object")
    reason = str(info.get("reason", ""))
    if set(data) == {"poison", "signal"}:
        if not isinstance(data["signal"], str):
            raise Unreadable("its 'signal' field is not text")
        return PoisonedMessage(data["signal"], reason, info=info)
    original = info.get("original")
    if set(data) == {"poison"} and original is None and isinstance(info.get("sha256"), str):
        return PoisonedMessage(None, reason, info=info)
    if set(data) != {"poison"} or not isinstance(original, str):
        raise Unreadable("it holds neither a signal nor a reference to one")
    owner = re.escape(endpoint) if endpoint is not None else "[a-z][a-z0-9]{2,39}"
    if not re.fullmatch(rf"{owner}/{_UUID}", original):
        raise Unreadable(f"its reference {original[:120]!r} is not a parked original of this queue")
    return PoisonedMessage(None, reason, original, info)


def _json_object(text: object) -> dict[str, Any] | None:
    """``text`` parsed as a JSON object, or None (not text, not JSON, nested deeper than the
    parser goes, or not an object)."""
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class PoisonRecord:
    reason: str
    endpoint: str | None = None
    message_type: str | None = None
    message_id: str | None = None
    dequeue_count: int | None = None
    """Deliveries tried before it was parked, as the wrapper says (the host's move says none)."""
    error_type: str | None = None
    original: str | None = None
    """The parked-originals blob holding the message, when it was parked by reference."""
    enqueued_at: str | None = None
    """When its queue message was inserted: its first try followed (``Reason``)."""
    failed_at: str | None = None
    """When the failure that parked it happened: the last failure."""
    sha256: str | None = None
    """For a text parked as an excerpt: the SHA-256 of the whole text, as the wrapper says."""
    chars: int | None = None
    """For a text parked as an excerpt: its length in characters, as the wrapper says."""
    newer: bool = False
    """A wrapper of a newer format than this version reads: nothing else of it is read (an
    upgraded version lists, shows and replays it)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_poison(body: str) -> PoisonRecord:
    """The record of one poison message's content, as far as the content says: for
    ``bus poison list`` and the filters of replays (``bus replay``, the bulk replay). The
    content came from a queue, so nothing in it is trusted: every field is optional, only
    text, numbers and times with a zone are read, and text is cut to ``MAX_REASON_CHARS``.
    Whatever cannot be read is left out, never an error; a wrapper of a newer format is a
    record that says so (``newer``), its reason the NewerVersion's text."""
    data = _json_object(body) or {}
    info = data.get("poison")
    if not isinstance(info, dict):
        return _from_signal(body, HOST_MOVED_REASON)
    try:
        json_version(data, "poison wrapper")
    except NewerVersion as e:
        return PoisonRecord(str(e), newer=True)
    except CorruptRecord:
        pass  # read as far as it goes, like any other damage
    signal = _from_signal(data.get("signal"), "")
    return PoisonRecord(
        reason=_text(info.get("reason")) or "",
        endpoint=_text(info.get("endpoint")),
        message_type=_text(info.get("message_type")) or signal.message_type,
        message_id=_text(info.get("message_id")) or signal.message_id,
        dequeue_count=_count(info.get("dequeue_count")),
        error_type=_text(info.get("error_type")),
        original=_text(info.get("original")),
        enqueued_at=_time(info.get("enqueued_at")),
        failed_at=_time(info.get("failed_at")),
        sha256=_digest(info.get("sha256")),
        chars=_count(info.get("chars")),
    )


def _from_signal(raw: object, reason: str) -> PoisonRecord:
    """A raw signal names its message id; the envelope copy it may carry names the type."""
    signal = _json_object(raw) if isinstance(raw, str) else None
    if signal is None:
        return PoisonRecord(reason)
    envelope = _json_object(signal.get("envelope"))
    return PoisonRecord(
        reason,
        message_id=_text(signal.get("message_id")),
        message_type=None if envelope is None else _text(envelope.get("type")),
    )


def _text(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return str(value)[:MAX_REASON_CHARS] or None


def _digest(value: object) -> str | None:
    return value if isinstance(value, str) and re.fullmatch("[0-9a-f]{64}", value) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(value: object) -> str | None:
    """An ISO 8601 time with its zone, in UTC to the second; anything else (no zone, not a
    time, out of range once in UTC) is left out."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            return None
        return moment.astimezone(UTC).isoformat(timespec="seconds")
    except (ValueError, OverflowError):
        return None


@dataclass
class ReplayReport:
    replayed: int = 0
    """Messages sent back to the endpoint's queue (in a dry run: that would be)."""
    skipped: list[str] = field(default_factory=list)
    """One line per poison message left where it is, saying why."""
    complete: bool = True
    """The pass looked at every message of the queue; false when it stopped with some not
    looked at (its look limit, its time: ``shared.bus.parked_pass``, or ``limit`` moved while
    more wait)."""


async def replay(
    account: StorageAccount,
    endpoint: str,
    limit: int = 1000,
    container: str = DEFAULT_PARKED_CONTAINER,
    *,
    select: Callable[[str], bool] | None = None,
    dry_run: bool = False,
) -> int:
    """Move up to ``limit`` poison messages of ``endpoint`` back to its queue; returns how
    many were moved (see ``replay_report``)."""
    report = await replay_report(
        account, endpoint, limit, container, select=select, dry_run=dry_run
    )
    return report.replayed


async def replay_report(
    account: StorageAccount,
    endpoint: str,
    limit: int = 1000,
    container: str = DEFAULT_PARKED_CONTAINER,
    step: Callable[[], None] | None = None,
    *,
    select: Callable[[str], bool] | None = None,
    ids: Collection[str] | None = None,
    dry_run: bool = False,
    look_limit: int | None = None,
) -> ReplayReport:
    """Move up to ``limit`` poison messages of ``endpoint`` back to its queue. Each is re-sent
    before it is deleted, so a crash can only duplicate a signal, which the pipeline ignores.

    ``select`` (given a poison message's content) chooses which to move, and ``ids`` (queue
    message ids), when given, limits the choice to those; ``dry_run`` moves
    none and counts those it would move. What cannot be replayed is skipped and reported,
    and stays in the poison queue (a dry run reports what it cannot unwrap). One pass
    (``shared.bus.parked_pass.walk``) looks at each message once, at most ``look_limit`` of
    them (None: as many as its time allows), and ends on an exhausted queue; what it leaves is
    made visible again at its end, so one pass never reports a message twice, and the
    report's ``complete`` says whether it looked at them all. ``step`` is called per message
    looked at."""
    poison = account.queue(poison_queue(endpoint))
    report = ReplayReport()

    async def visit(message: QueueMessage) -> bool:
        if step is not None:
            step()
        if (ids is not None and message.id not in ids) or (
            select is not None and not select(message.content)
        ):
            return False
        problem, original = await _try(account, endpoint, message.content, container, dry_run)
        if problem is not None:
            report.skipped.append(f"{endpoint}: skipped poison message {message.id}: {problem}")
            return False
        report.replayed += 1
        if dry_run:
            return False
        await discard(poison, message, account.blob_container(container), original)
        return True

    report.complete = await walk(
        poison, visit, limit=look_limit, enough=lambda: report.replayed >= limit
    )
    return report


async def discard(
    poison: MessageQueue, message: QueueMessage, parked: BlobContainer, original: str | None
) -> bool:
    """Delete a received poison message, then the parked original it refers to (if any), in
    that order: a crash between leaves an orphan, which the cleanup removes after its grace
    period, never a poison message whose original is gone. Returns False when the message
    was not deleted (received by someone else since): its original then stays, for them."""
    try:
        await poison.delete(message.id, message.pop_receipt)
    except NotFound:
        return False
    if original is not None:
        with contextlib.suppress(NotFound):
            await parked.delete(original)
    return True


NOTHING_TO_REPLAY = "only an excerpt of it was kept (refused before any token: nothing to replay)"


async def _try(
    account: StorageAccount, endpoint: str, content: str, container: str, dry_run: bool
) -> tuple[str | None, str | None]:
    """Why one poison message cannot be replayed (or None once it is), and the parked original
    to delete once the poison message is gone. A dry run only checks that it unwraps to
    something to replay, and sends nothing."""
    if not dry_run:
        return await _replay_one(account, endpoint, content, container)
    try:
        parked = unwrap(content, endpoint)
    except Unreadable as e:
        return f"cannot unwrap it: {e}", None
    except NewerVersion as e:
        return str(e), None
    return (NOTHING_TO_REPLAY if parked.excerpt_only else None), None


async def _replay_one(
    account: StorageAccount, endpoint: str, content: str, container: str
) -> tuple[str | None, str | None]:
    """Send one poison message's original back; returns why not (or None when sent), and the
    parked original it came from."""
    try:
        parked = unwrap(content, endpoint)
    except Unreadable as e:
        return f"cannot unwrap it: {e}", None
    except NewerVersion as e:
        return str(e), None
    if parked.signal is not None:
        try:
            await account.queue(endpoint).send(parked.signal)
        except TooLarge as e:
            return f"its signal cannot be sent: {e}", None
        except UnicodeEncodeError:
            return "its signal is not valid text (a lone surrogate escaped in its JSON)", None
        return None, None
    original = parked.original
    if original is None:
        return NOTHING_TO_REPLAY, None
    blobs = account.blob_container(container)
    try:
        signal = (await blobs.read(original)).data.decode("utf-8")
    except NotFound:
        return f"its original {original} is not in container {container}", None
    except UnicodeDecodeError:
        return f"its original {original} is not UTF-8 text", None
    try:
        await account.queue(endpoint).send(signal)
    except TooLarge as e:
        return f"its original {original} cannot be sent on a queue: {e}", None
    return None, original
