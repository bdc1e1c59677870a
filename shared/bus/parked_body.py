"""A parked message's whole body as a download: checked first, then streamed, never held whole.

The body lives in the message's token (inline in its envelope, or in a shared payload the
envelope names: ``shared.bus.payloads``), or, once the token is gone, in the signal's own
envelope copy. The token can be as large as the largest message, so it is read in chunks of
``CHUNK_BYTES`` (``BlobContainer.read_range``), twice:

1. the check: every chunk hashed against the digest in the token's name (and a shared
   payload's against its reference), and the body's place in the envelope found
   (``shared.bus.body_span``); the envelope's other fields are parsed and must name the
   signal's message. An altered or missing body raises ``BodyWithheld``: nothing is served.
2. the stream: the body's bytes, read again chunk by chunk, each read pinned to the ETag the
   check read (``If-Match``), so the stream is the bytes that were checked or it stops with
   PreconditionFailed (the blob changed meanwhile: the download ends short of its length).

What is served is the body as the message holds it (its JSON as stored, not indented). A
parked text that is no signal (refused, or an excerpt) is small, at most a queue message,
and is served as ``bus poison show`` reads it (``shared.bus.poison_view``).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from shared.bus.body_span import BodySpan
from shared.bus.envelope import TOKEN_NAME, Envelope, Signal
from shared.bus.payloads import payload_name
from shared.bus.poison import Unreadable, unwrap
from shared.bus.poison_view import view
from shared.errors import BusError, MalformedSignal, NewerVersion, NotFound
from shared.stores.account import StorageAccount
from shared.stores.blob import BlobContainer
from shared.stores.queue import QueueMessage

CHUNK_BYTES = 256 * 1024
"""How much of a token or payload is read, hashed and handed on at a time."""
MAX_FIELDS_BYTES = 256 * 1024
"""The most an envelope's fields besides its body may take (headers, ids, the payload's
reference): they are parsed whole, so a larger envelope is refused rather than held."""


class BodyWithheld(BusError):
    """The body is not served: ``state`` is ``missing`` or ``altered``, the text says why."""

    def __init__(self, state: str, why: str) -> None:
        super().__init__(why)
        self.state = state


@dataclass(frozen=True)
class BodyDownload:
    """A checked body: ``size`` bytes, ``chunks()`` yields them in order (at most
    ``CHUNK_BYTES`` each), ``note`` says where they were read."""

    size: int
    chunks: Callable[[], AsyncIterator[bytes]]
    note: str


@dataclass(frozen=True)
class _Stored:
    """Bytes to read in chunks: a blob's version (``etag``), or bytes already in memory."""

    size: int
    blobs: BlobContainer | None = None
    name: str = ""
    etag: str = ""
    data: bytes = b""

    async def chunks(self, start: int, end: int) -> AsyncIterator[bytes]:
        for at in range(start, end, CHUNK_BYTES):
            length = min(CHUNK_BYTES, end - at)
            if self.blobs is None:
                yield self.data[at : at + length]
                continue
            piece = await self.blobs.read_range(self.name, at, length, etag=self.etag)
            if len(piece) != length:  # the same version cannot shrink: a store in error
                raise BodyWithheld("altered", f"{self.name} ended before its size")
            yield piece


async def _stored_blob(blobs: BlobContainer, name: str) -> _Stored | None:
    try:
        properties = await blobs.get_properties(name)
    except NotFound:
        return None
    return _Stored(properties.size, blobs, name, properties.etag)


async def body_download(
    account: StorageAccount,
    endpoint: str,
    message: QueueMessage,
    *,
    tokens: str,
    parked: str,
    payloads: str,
) -> BodyDownload:
    """The whole body of ``message`` of ``endpoint``'s poison queue, checked (see the
    module); raises BodyWithheld when it is missing or altered."""
    raw = await _parked_signal(account, endpoint, message, parked)
    signal = None if raw is None else _signal(raw)
    if signal is None:
        return await _small(account, endpoint, message, (tokens, parked, payloads))
    envelope = await _stored_blob(account.blob_container(tokens), signal.token)
    where = f"token {signal.token}"
    if envelope is None:
        copy = signal.bound_envelope_copy()
        if copy is None:
            raise BodyWithheld("missing", f"its token {signal.token} is gone, with no copy")
        data = copy.encode("utf-8")
        envelope, where = _Stored(len(data), data=data), "the signal's copy of the envelope"
    return await _checked(account.blob_container(payloads), signal, envelope, where)


async def _parked_signal(
    account: StorageAccount, endpoint: str, message: QueueMessage, parked: str
) -> str | None:
    """The parked signal's text (inline, or its parked original: a signal long at most), or
    None when the poison message holds no signal to follow."""
    try:
        poisoned = unwrap(message.content, endpoint)
    except (Unreadable, NewerVersion):
        return None
    if poisoned.signal is not None or poisoned.original is None:
        return poisoned.signal
    try:
        return (await account.blob_container(parked).read(poisoned.original)).data.decode()
    except (NotFound, UnicodeDecodeError):
        return None


def _signal(raw: str) -> Signal | None:
    try:
        return Signal.parse(raw)
    except (MalformedSignal, NewerVersion, RecursionError):
        return None


async def _small(
    account: StorageAccount, endpoint: str, message: QueueMessage, containers: tuple[str, ...]
) -> BodyDownload:
    """A parked text that is no signal (or a wrapper that cannot be followed): what the view
    shows of it, all of it at most a queue message or a parked original long."""
    tokens, parked, payloads = containers
    seen = await view(account, endpoint, message, tokens=tokens, parked=parked, payloads=payloads)
    if seen.body.text is None:
        raise BodyWithheld(seen.body.state, seen.body.note)
    data = seen.body.text.encode("utf-8")
    stored = _Stored(len(data), data=data)
    return BodyDownload(len(data), lambda: stored.chunks(0, len(data)), seen.body.note)


async def _checked(
    payloads: BlobContainer, signal: Signal, stored: _Stored, where: str
) -> BodyDownload:
    """The body of the envelope ``stored``, once its bytes proved to be the signal's."""
    named = TOKEN_NAME.fullmatch(signal.token)
    digest = None if named is None else named["digest"]
    span, fields, hashed = await _first_pass(stored)
    if digest is not None and hashed != digest:
        raise BodyWithheld("altered", f"{where} does not match the digest in its name")
    try:
        envelope = Envelope.from_bytes(fields)
    except (ValueError, MalformedSignal, NewerVersion):
        raise BodyWithheld("altered", f"{where} does not hold an envelope") from None
    if envelope.id != signal.message_id or envelope.partition_key != signal.partition_key:
        raise BodyWithheld("altered", f"{where} holds another message than the signal names")
    unchecked = "" if digest is not None else " (unchecked: its name has no digest)"
    if envelope.payload is None:
        start, end = span
        return BodyDownload(end - start, lambda: stored.chunks(start, end), where + unchecked)
    reference = envelope.payload
    name = payload_name(signal.token, reference.digest)
    payload = await _stored_blob(payloads, name)
    if payload is None:
        raise BodyWithheld("missing", f"the shared payload {name} is missing")
    if payload.size != reference.size or await _digest(payload) != reference.digest:
        raise BodyWithheld("altered", f"the shared payload {name} is not the one its token names")
    note = f"{where} and its shared payload{unchecked}"
    return BodyDownload(payload.size, lambda: payload.chunks(0, payload.size), note)


async def _first_pass(stored: _Stored) -> tuple[tuple[int, int], bytes, str]:
    """The body's span in the envelope, the envelope's bytes with an empty body in its place
    (its other fields), and the digest of all its bytes."""
    span, digest = BodySpan(), hashlib.sha256()
    kept = bytearray()
    offset = 0
    async for chunk in stored.chunks(0, stored.size):
        digest.update(chunk)
        span.feed(chunk)
        kept += _outside(chunk, offset, span.start, span.end)
        offset += len(chunk)
        if len(kept) > MAX_FIELDS_BYTES:
            raise BodyWithheld("altered", "its envelope's fields besides the body are too large")
    if span.twice or (span.start is not None and span.end is None):
        raise BodyWithheld("altered", "its envelope has no single body field")
    if span.start is None or span.end is None:  # no body inline: a shared payload's reference
        return (0, 0), bytes(kept), _urlsafe(digest.digest())
    # An empty stand-in of the body's kind: an object for a body, null beside a reference.
    stand_in = b"{}" if span.opens == ord("{") else b"null"
    body_free = bytes(kept[: span.start]) + stand_in + bytes(kept[span.start :])
    return (span.start, span.end), body_free, _urlsafe(digest.digest())


def _outside(chunk: bytes, offset: int, start: int | None, end: int | None) -> bytes:
    """The bytes of ``chunk`` (at ``offset``) that are not the body's ``start``..``end``."""
    low = len(chunk) if start is None else max(0, min(len(chunk), start - offset))
    high = len(chunk) if end is None else max(0, min(len(chunk), end - offset))
    return chunk[:low] + (chunk[high:] if end is not None else b"")


async def _digest(stored: _Stored) -> str:
    digest = hashlib.sha256()
    async for chunk in stored.chunks(0, stored.size):
        digest.update(chunk)
    return _urlsafe(digest.digest())


def _urlsafe(raw: bytes) -> str:
    """A SHA-256 as ``envelope_digest`` writes it (unpadded base64url)."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
