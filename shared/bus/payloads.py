"""Shared payloads: one body stored once for the several deliveries of one message.

A message for several destinations (an event's subscribers, one command sent to several
endpoints) would otherwise write its whole body into each destination's token. When it goes
to two or more destinations and its inline envelope is longer than the threshold
(``BusConfig.shared_payload_min_chars``, ``MAX_INLINE_ENVELOPE_CHARS`` by default), the body
is written once, as a payload blob, and each token's envelope carries a reference instead
(``PayloadReference``: the SHA-256 and size of the payload's bytes).

Why the threshold: an envelope up to ``MAX_INLINE_ENVELOPE_CHARS`` travels in its signal, and
the receiver skips reading its token; sharing it would add one read per receiver. Above it the
receiver reads one blob either way (the payload instead of the token, whose now small
envelope rides in the signal), and the publish writes the body once instead of n times.

Binding (docs/trust-model.md): the token's name ends with the SHA-256 of its envelope bytes,
the envelope holds the payload's digest and size, and the payload's name is derived from the
token's own name (its sender and incoming-id segments) and that digest, never from anything
else in a signal. The chain token name -> envelope bytes -> payload digest -> payload bytes
means nobody with queue or blob write access can get a body processed that the sender did not
write: a payload whose bytes do not match is ``PayloadAltered`` (parked, token kept).

Name: ``{sender}/{incoming-id}/{digest}`` in the payloads container, with the origin metadata
of the tokens that refer to it (``shared.bus.origin``); the cleanup's ``SharedPayloads``
task removes it once no token can still need it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from shared.bus.envelope import (
    PAYLOAD_NAME,
    TOKEN_NAME,
    Envelope,
    PayloadReference,
    envelope_digest,
)
from shared.errors import InvalidName, NotFound, PayloadAltered, PayloadMissing
from shared.stores.blob import BlobContainer

Payloads = dict[str, bytes]
"""Digest -> the bytes of each distinct shared body of a round."""


def body_bytes(body: Mapping[str, Any]) -> bytes:
    """The bytes a shared body is stored as (compact JSON, UTF-8)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def payload_name(token: str, digest: str) -> str:
    """The payload a token refers to: its sender and incoming-id segments and ``digest``."""
    match = TOKEN_NAME.fullmatch(token)
    if match is None:
        raise InvalidName(f"token name {token[:200]!r} is outside the token naming scheme")
    return payload_blob(match["sender"], match["incoming"], digest)


def payload_blob(sender: str, incoming_id: str, digest: str) -> str:
    """The name of the payload of ``digest`` written while ``sender`` processed
    ``incoming_id``."""
    name = f"{sender}/{incoming_id}/{digest}"
    if not PAYLOAD_NAME.fullmatch(name):
        raise InvalidName(f"payload name {name[:200]!r} is outside the payload naming scheme")
    return name


def share(deliveries: list[Envelope], min_chars: int) -> tuple[list[Envelope], Payloads]:
    """The envelopes the tokens carry, and the payloads to write first: a body that two or
    more deliveries carry, in an envelope longer than ``min_chars``, is replaced by its
    reference."""
    sized = [(e, body_bytes(e.body or {})) for e in deliveries]
    uses = Counter(envelope_digest(data) for _, data in sized)
    envelopes: list[Envelope] = []
    payloads: Payloads = {}
    for envelope, data in sized:
        digest = envelope_digest(data)
        alone = envelope.body is None or uses[digest] < 2
        if alone or len(envelope.model_dump_json()) <= min_chars:
            envelopes.append(envelope)
        else:
            payloads[digest] = data
            reference = PayloadReference(digest=digest, size=len(data))
            envelopes.append(envelope.model_copy(update={"body": None, "payload": reference}))
    return envelopes, payloads


async def write_payloads(
    container: BlobContainer,
    payloads: Payloads,
    *,
    sender: str,
    incoming_id: str,
    metadata: Mapping[str, str],
) -> None:
    """Write each payload unconditionally (create or overwrite), before the round creates
    any token that refers to it. The rewrite is deliberate: every round that may reference a
    payload refreshes its last-modified time and ETag, so the cleanup, which deletes only a
    payload older than the grace period and only ``If-Match`` the ETag it judged, never
    removes one a round still running has written."""
    for digest, data in payloads.items():
        await container.upload(payload_blob(sender, incoming_id, digest), data, metadata)


async def resolve(container: BlobContainer, token: str, envelope: Envelope) -> Envelope:
    """``envelope`` with its body inline: as it is, or read from its shared payload, whose
    size and SHA-256 are checked against the reference before anything is parsed.

    Raises PayloadMissing when the payload is absent (the caller decides whether the
    token's own absence makes it a duplicate) and PayloadAltered when its bytes are not the
    ones the reference names."""
    reference = envelope.payload
    if reference is None:
        return envelope
    name = payload_name(token, reference.digest)
    try:
        data = (await container.read(name)).data
    except NotFound:
        raise PayloadMissing(
            f"the shared payload {name} of message {envelope.id} (token {token}) is missing"
        ) from None
    if len(data) != reference.size or envelope_digest(data) != reference.digest:
        raise PayloadAltered(
            f"the shared payload {name} of message {envelope.id} is not the one its token "
            f"names ({len(data)} bytes, {reference.size} expected, or another SHA-256): "
            "altered since it was sent"
        )
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        raise PayloadAltered(f"the shared payload {name} of message {envelope.id} is no body")
    return envelope.model_copy(update={"body": body, "payload": None})
