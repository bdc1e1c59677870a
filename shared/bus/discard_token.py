"""The token of a parked message an operator discards: found, proved to be that message's, and
removed once its envelope is in the archive entry (``shared.bus.discard``).

A parked message keeps its token until it is replayed or discarded; a discard that left it
would leave it for ever (the backlog's oldest token would never clear, and the origin record
that committed it could never retire). The poison message is not trusted: its signal names a
token, which is removed only when the token proves to be that message's (its bytes match the
digest in its name, and its envelope has the signal's message id and partition key and is
addressed to the endpoint whose poison queue held it). The delete is guarded by the ETag the
token was read with: a token claimed or changed since belongs to whoever changed it, and stays.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from shared.bus.envelope import TOKEN_NAME, Envelope, Signal, envelope_digest
from shared.bus.poison import Unreadable, unwrap
from shared.errors import MalformedSignal, NewerVersion, NotFound, PreconditionFailed
from shared.stores.blob import BlobContainer


@dataclass(frozen=True)
class ParkedToken:
    """A discarded message's token as read: its name, its ETag then, and its envelope."""

    name: str
    etag: str
    envelope: str


async def parked_token(
    content: str, endpoint: str, tokens: BlobContainer, parked: BlobContainer
) -> ParkedToken | None:
    """The token of the message ``content`` (a poison message of ``endpoint``) parks, when it
    exists and proves to be that message's; None otherwise (no signal, no token, or a token
    that is another message's)."""
    signal = await _signal(content, endpoint, parked)
    if signal is None:
        return None
    try:
        blob = await tokens.read(signal.token)
    except NotFound:
        return None
    named = TOKEN_NAME.fullmatch(signal.token)
    digest = None if named is None else named["digest"]  # None: named before digests
    if digest is not None and digest != envelope_digest(blob.data):
        return None
    try:
        envelope = Envelope.from_bytes(blob.data)
        text = blob.data.decode("utf-8")
    except ValueError:
        return None
    if (envelope.id, envelope.partition_key, envelope.destination) != (
        signal.message_id,
        signal.partition_key,
        endpoint,
    ):
        return None
    return ParkedToken(signal.token, blob.etag, text)


async def remove_token(tokens: BlobContainer, token: ParkedToken) -> bool:
    """Delete ``token`` if it is unchanged since it was read; False when it is gone or changed."""
    with contextlib.suppress(NotFound, PreconditionFailed):
        await tokens.delete(token.name, etag=token.etag)
        return True
    return False


async def _signal(content: str, endpoint: str, parked: BlobContainer) -> Signal | None:
    """The signal a poison message holds, inline or in its parked original; None when it holds
    none that parses."""
    try:
        held = unwrap(content, endpoint)
    except (Unreadable, NewerVersion):
        return None
    raw = held.signal
    if raw is None and held.original is not None:
        try:
            raw = (await parked.read(held.original)).data.decode("utf-8")
        except (NotFound, UnicodeDecodeError):
            return None
    if raw is None:
        return None
    try:
        return Signal.parse(raw)
    except (MalformedSignal, NewerVersion, RecursionError):
        return None
