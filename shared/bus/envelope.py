"""The envelope stored in a token blob, and the signal sent on a queue to announce it."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import datetime
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from shared.app_settings import MAX_DELAYED_RETRIES
from shared.bus.formats import json_version
from shared.bus.messages import Kind
from shared.errors import InvalidName, MalformedSignal
from shared.logsafe import problems

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_SENDER = r"[a-z][a-z0-9]{2,39}"
DIGEST_CHARS = 43
"""A SHA-256 digest in unpadded URL-safe base64."""
_DIGEST = rf"[A-Za-z0-9_-]{{{DIGEST_CHARS}}}"
# {sender}/{incoming-id}/{attempt-id}/{out-id}/{digest}: every segment is constrained, so a
# signal can only ever name a blob inside the token scheme (no '..', no other prefixes, no other
# container). Always matched whole (``fullmatch``): '$' alone would accept a trailing newline.
# The digest (see ``envelope_digest``) binds the name to the exact envelope bytes the token was
# created with; names from before it was added have no digest and are only ever read (R1).
TOKEN_NAME = re.compile(
    rf"(?P<sender>{_SENDER})/(?P<incoming>{_UUID})/(?P<attempt>{_UUID})/"
    rf"(?P<out>{_UUID})(?:/(?P<digest>{_DIGEST}))?"
)
# {sender}/{incoming-id}/{digest}: a shared payload (``shared.bus.payloads``), named by the
# sender and incoming id of the tokens that refer to it and by the SHA-256 of its bytes.
PAYLOAD_NAME = re.compile(rf"(?P<sender>{_SENDER})/(?P<incoming>{_UUID})/(?P<digest>{_DIGEST})")
MAX_INLINE_ENVELOPE_CHARS = 8192
"""Envelopes up to this size travel in the signal too (see ``Signal.envelope``)."""
MAX_SIGNAL_CHARS = 2048 + MAX_INLINE_ENVELOPE_CHARS
SIGNAL_ROOM_CHARS = 64
"""What a sender leaves free under ``MAX_SIGNAL_CHARS`` for the counters a signal gains when
it is sent again (``retry``), so that a copy sent again is still a signal."""
_ETAG = re.compile(r'"?[0-9A-Za-z]{1,64}"?')
MAX_GIVE_BACKS = 1000
"""The largest give-back count a signal may carry (``Signal.given_back``): more than the
longest window (``BUS_GIVE_BACK_SECONDS``, one day) takes at the longest delay
(``shared.bus.giveback``)."""


class PayloadReference(BaseModel):
    """Where a token's body is when it is shared with the other deliveries of its message:
    the SHA-256 (``envelope_digest``) and size of the payload blob's bytes. The blob's name
    is derived from the referring token's name and this digest (``shared.bus.payloads``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    digest: str = Field(pattern=rf"^{_DIGEST}$")
    size: int = Field(ge=0)


class Envelope(BaseModel):
    """Everything about one message delivery except the queue signal. The body is inline
    (``body``) or shared with the message's other deliveries (``payload``): exactly one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int | None = None
    """The format version (``shared.bus.formats``); absent in the first format, whose bytes
    (and so the digests in its token names) stay exactly as they were."""
    id: str
    type: str
    kind: Kind
    source: str
    destination: str
    partition_key: str
    correlation_id: str
    causation_id: str | None
    created_at: datetime
    headers: dict[str, str] = Field(default_factory=dict)
    body: dict[str, Any] | None = None
    deliver_at: datetime | None = None
    """A delayed message's due time: no receiver processes it before then
    (``shared.bus.schedule``). It is part of the token's bytes, so the digest in the token's
    name protects it like the rest of the envelope."""
    payload: PayloadReference | None = None
    """A shared body's reference, in place of ``body``. Part of the token's bytes like the
    rest, so the token's name binds the payload's digest too."""
    type_version: int | None = Field(default=None, ge=1)
    """The version of ``type`` the body was written as (``Message.version``); absent means
    1, and it is written only above 1, so a version-1 message's bytes stay as they were."""

    @model_validator(mode="before")
    @classmethod
    def _known_format(cls, data: Any) -> Any:
        """The format version first: a newer format may have other fields (NewerVersion)."""
        json_version(data, "envelope", MalformedSignal)
        return data

    @model_validator(mode="after")
    def _one_body(self) -> Envelope:
        if (self.body is None) == (self.payload is None):
            raise ValueError("an envelope carries either its body or a payload reference")
        return self

    @model_serializer(mode="wrap")
    def _without_absent_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        """An undelayed envelope with its body inline, of a version-1 type, serialises as it
        did before due times, shared payloads and type versions existed: its bytes, and so the
        digests in its token names, stay the same."""
        data = handler(self)
        if isinstance(data, dict):
            for optional in ("v", "deliver_at", "payload", "body", "type_version"):
                if optional in data and data[optional] is None:
                    del data[optional]
        return data

    def to_bytes(self) -> bytes:
        """The token's bytes: ``model_dump_json()`` as UTF-8, straight from the serialiser
        (the text and its encoding would be two more copies of a large body)."""
        return self.__pydantic_serializer__.to_json(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> Envelope:
        return cls.model_validate_json(data)

    @property
    def body_version(self) -> int:
        """The type version its body was written as (1 when the envelope does not say)."""
        return 1 if self.type_version is None else self.type_version


def envelope_digest(envelope_bytes: bytes) -> str:
    """SHA-256 of a token's exact envelope bytes, unpadded base64url (43 characters).

    It is the last segment of the token's name. A signal's envelope copy whose digest equals
    the name's is, byte for byte, what the token was created with (finding another one would
    take a SHA-256 second preimage); together with the claim's ``If-Match`` on the creation
    ETag, the hinted path then processes exactly the token's content."""
    digest = hashlib.sha256(envelope_bytes).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def token_name(
    sender: str, incoming_id: str, attempt_id: str, out_id: str, envelope_bytes: bytes
) -> str:
    """The name of the token that carries ``envelope_bytes``."""
    name = f"{sender}/{incoming_id}/{attempt_id}/{out_id}/{envelope_digest(envelope_bytes)}"
    if not TOKEN_NAME.fullmatch(name):
        raise InvalidName(f"token name {name!r} is outside the naming scheme")
    return name


def token_prefix(sender: str, incoming_id: str) -> str:
    """Every token created while processing ``incoming_id`` at ``sender`` starts with this."""
    return f"{sender}/{incoming_id}/"


class Signal(BaseModel):
    """The queue message: small, and pointing at exactly one token.

    ``etag`` and ``envelope`` are hints the sender adds when it signals a token it has just
    created: the token's ETag as created and a copy of its envelope. Anyone who may send to
    the queue can write a signal, so the copy is used only when ``bound_envelope_copy``
    proves it is the token's content: its SHA-256 equals the digest in the token's name. Token
    mode then skips reading the token (R1) and claims it straight away with
    ``If-Match: etag``; the claim succeeding proves the token still exists unclaimed and
    unchanged since its creation. A copy that is not bound, a failed claim, or a signal re-sent
    from a committed outbox record (which keeps no envelopes) falls back to reading the token.
    The token stays the source of truth; the hints only save a request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int | None = None
    """The format version (``shared.bus.formats``); absent in the first format."""
    message_id: str
    attempt_id: str
    token: str
    partition_key: str
    etag: str | None = None
    envelope: str | None = None
    retry: int | None = Field(default=None, ge=1, le=MAX_DELAYED_RETRIES)
    """How many delayed retries this signal's message has had (``shared.bus.retries``); set
    only on the signals a retry policy sends. Trusted for counting retries, nothing else."""
    given_back: int | None = Field(default=None, ge=1, le=MAX_GIVE_BACKS)
    """How often an instance that could not read this signal's message (written by a newer
    version) gave it back for an upgraded one (``shared.bus.giveback``). Trusted for counting,
    nothing else: a forged count can only make the message park sooner or later."""

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True)

    def bound_envelope_copy(self) -> str | None:
        """The envelope copy if the token's name proves it is byte for byte the envelope the
        token was created with; None without a copy, for names without a digest (from before
        digests), or for a copy that is not the token's (forged or corrupted)."""
        if self.envelope is None or self.etag is None:
            return None
        match = TOKEN_NAME.fullmatch(self.token)
        if match is None or match["digest"] is None:
            return None
        if match["digest"] != envelope_digest(self.envelope.encode("utf-8")):
            return None
        return self.envelope

    @classmethod
    def parse(cls, raw: str) -> Signal:
        """Validate a queue message as a signal, or raise MalformedSignal saying why."""
        if len(raw) > MAX_SIGNAL_CHARS:
            raise MalformedSignal(
                f"signal is {len(raw)} characters; at most {MAX_SIGNAL_CHARS} expected"
            )
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise MalformedSignal(f"signal is not JSON: {e}") from None
        # Before the schema: a newer format may have other fields.
        json_version(data, "signal", MalformedSignal)
        try:
            signal = cls.model_validate(data)
        except ValidationError as e:
            raise MalformedSignal(f"signal has the wrong schema: {problems(e, 'signal')}") from None
        match = TOKEN_NAME.fullmatch(signal.token)
        if match is None:
            raise MalformedSignal(
                f"token name {signal.token[:200]!r} is outside the token naming scheme"
            )
        if match["attempt"] != signal.attempt_id or match["out"] != signal.message_id:
            raise MalformedSignal("signal's message or attempt id does not match its token name")
        if signal.etag is not None and not _ETAG.fullmatch(signal.etag):
            # It becomes a request header: nothing but an ETag's characters may get there.
            raise MalformedSignal(f"signal's token ETag {signal.etag[:80]!r} is not an ETag")
        if (signal.envelope is None) != (signal.etag is None):
            raise MalformedSignal("a signal carries its token's ETag and envelope together")
        if signal.envelope is not None and len(signal.envelope) > MAX_INLINE_ENVELOPE_CHARS:
            raise MalformedSignal(
                f"signal's envelope copy is {len(signal.envelope)} characters; "
                f"at most {MAX_INLINE_ENVELOPE_CHARS} expected"
            )
        return signal


def bus_message_id(raw: str) -> str | None:
    """The bus's message id a queue message's text names (the id ``bus send`` printed and
    ``bus replay --id`` takes), for log lines and poison reasons; None when it names none.
    What the text claims, not proof of anything (the token is): escape it before showing."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    value = data.get("message_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None
