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
from collections.abc import Mapping
from functools import cached_property
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
    reference.

    Deliveries carry one body when they hold the same body object, as the deliveries of one
    output do (``plan_deliveries``): each such body is encoded and hashed once, however many
    deliveries carry it. (Encoding every delivery's body took 1.27 s for one 1 MiB event to
    50 subscribers, and 4.1 s for 256 KiB to 1,000.) Identity, not equality: Python finds
    ``True == 1``, and two bodies equal that way are different JSON."""
    bodies: dict[int, _Body] = {}
    for envelope in deliveries:
        if envelope.body is not None:
            found = bodies.setdefault(id(envelope.body), _Body(envelope.body))
            found.uses += 1
    envelopes: list[Envelope] = []
    payloads: Payloads = {}
    for envelope in deliveries:
        body = None if envelope.body is None else bodies[id(envelope.body)]
        if body is None or body.uses < 2 or not _longer_than(envelope, body, min_chars):
            envelopes.append(envelope)
            continue
        payloads[body.digest] = body.data
        reference = PayloadReference(digest=body.digest, size=len(body.data))
        envelopes.append(envelope.model_copy(update={"body": None, "payload": reference}))
    return envelopes, payloads


class _Body:
    """One body object that deliveries carry, encoded once when first needed."""

    def __init__(self, value: Mapping[str, Any]) -> None:
        self.value = value  # held, so that its id() stays its own while ``share`` runs
        self.uses = 0

    @cached_property
    def data(self) -> bytes:
        return body_bytes(self.value)

    @cached_property
    def digest(self) -> str:
        return envelope_digest(self.data)


def _longer_than(envelope: Envelope, body: _Body, min_chars: int) -> bool:
    """Whether ``envelope`` with its body inline takes more than ``min_chars`` characters:
    its other fields with an empty body, plus the body's text (whose characters are counted
    only where they may differ from its UTF-8 bytes in the outcome)."""
    rest = len(envelope.model_copy(update={"body": {}}).model_dump_json()) - len("{}")
    data = body.data
    chars = len(data.decode("utf-8")) if len(data) <= 4 * min_chars else len(data)
    return rest + chars > min_chars


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
