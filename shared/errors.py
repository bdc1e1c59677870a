"""The project's own error hierarchy.

Adapters translate SDK exceptions into these at the edge (``raise X(...) from e``) so that the
pipeline, the simulator and the tests reason about one set of outcomes whatever the backend.
"""

from __future__ import annotations


class BusError(Exception):
    """Base class of every error raised by this library."""


class ConfigurationError(BusError):
    """Settings are missing or contradictory; raised at start-up, never mid-message."""


class InvalidName(BusError, ValueError):
    """A container, blob, table, key or queue name breaks Azure's naming rules or ours."""


class StorageError(BusError):
    """A storage operation failed with a definite outcome: it was *not* applied."""


class NotFound(StorageError):
    """The addressed blob, entity, queue message or resource does not exist."""


class AlreadyExists(StorageError):
    """A create-if-absent found the item already there (HTTP 409)."""


class PreconditionFailed(StorageError):
    """An ETag condition did not hold: someone else changed the item first (HTTP 412)."""


class TooLarge(StorageError):
    """A payload, property, entity or batch exceeds a storage limit; nothing was written."""


class TransactionFailed(StorageError):
    """A table transaction was rejected as a whole because of one operation.

    ``index`` is the position of the failing operation in the submitted batch and ``cause``
    the error that operation alone would have raised (AlreadyExists, PreconditionFailed, ...).
    """

    def __init__(self, index: int, cause: StorageError) -> None:
        super().__init__(f"transaction rejected at operation {index}: {cause}")
        self.index = index
        self.cause = cause


class OutcomeUnknown(BusError):
    """The request may or may not have been applied (timeout, connection loss, 5xx).

    Callers must treat the target as in an unknown state: the exactly-once protocol abandons an
    attempt id whose create ended like this, because the create may still land later.
    """


class StateUnreachable(OutcomeUnknown):
    """The app's state store (an endpoint's table in the state account, or its PostgreSQL
    database) did not answer: a timeout, a lost connection, a 5xx. Raised at the edge of an
    endpoint's rows (``shared.bus.state``) in place of ``OutcomeUnknown``, so that the failure
    table can tell an outage of the state store from one of the messaging account: the message
    waits for the store rather than spending its tries (``shared.bus.failures``)."""


class InvalidValue(BusError, ValueError):
    """A value cannot be stored as given (unsupported type, out of range, naive datetime)."""


class CorruptRecord(BusError):
    """A row in the bus's own layout (outbox, dedup, state, ingress record) holds a field of
    the wrong type or value, so something other than this library wrote it. Raised rather than
    guess what the row means; the text names the row and the field."""


class MalformedSignal(BusError):
    """A queue message is not a valid signal (bad JSON, wrong schema, a token name outside the
    naming scheme). It is parked in the poison queue with this reason; nothing is read."""


class PayloadAltered(MalformedSignal):
    """A token refers to a shared payload whose bytes are not the ones its envelope's digest
    and size name: someone with write access to the payloads container replaced them. The
    message is parked with this reason and its token kept; nothing of the altered bytes is
    processed."""


class PayloadMissing(BusError):
    """A token's shared payload is absent while the token still exists. Retried (the message
    is given back, and parked with this reason after the host's last try), never taken for
    a duplicate: only the token's absence proves the message was processed."""


class NewerVersion(BusError):
    """What was read was written by a newer version than this instance: a wire format
    (envelope, signal, token metadata, outbox or ingress record, poison wrapper) newer than
    the ones it reads, or a message type or type version its endpoints do not know yet.
    A rolling deploy runs old and new instances side by side, so the message is given back
    for an upgraded instance (a bounded number of times, then parked with this reason);
    it is never processed by a reader that would misread it, and never dropped."""


class UnknownMessageType(NewerVersion):
    """The envelope names a message type the endpoint has no handler for: perhaps a type a
    newer version of the app added or renamed, so it is given back before it is parked."""


class NewerTypeVersion(NewerVersion):
    """The envelope's type version is above the one the receiving model is at: a newer
    version of the app changed the type, so the message is given back, never misread."""


class MessageSchemaError(BusError):
    """The envelope body does not validate against the registered message model."""


class PermanentFailure(BusError):
    """Processing this message cannot succeed however often it is tried: the bus parks it in
    the poison queue at once, with this error as its reason, whatever the endpoint's retry
    policy. Raised only before anything of the message's round committed, so parking it
    loses nothing and ``bus replay`` can run it again once the cause is fixed."""


class MessageTooLarge(PermanentFailure):
    """An outgoing message (or the set of them) exceeds the configured limits; refused at send
    time so that nothing is half-sent. At an entry point (``bus send``, the HTTP ingress, a
    bulk row) it is bad input; in a handler, the same message would be refused on every try."""


class LimitExceeded(PermanentFailure):
    """A write whose size the message fixes (the endpoint's state after the handler, its
    dedup record, its audit row) is over a storage limit, so the commit was refused and
    nothing was written. The text names the row, the size and the limit."""


class DoNotRetry(PermanentFailure):
    """Raised by a handler for a message that can never succeed (a business rule refuses it,
    a referenced record is gone for good): the bus parks it in the poison queue at once, with
    this error as its reason, whatever the endpoint's retry policy. Nothing it did commits;
    ``bus replay`` can still run it again once the cause is fixed."""


class CancelRefused(PermanentFailure):
    """A cancellation that must not be carried out (``shared.bus.cancel``): the message is
    not the canceller's to cancel (another sender's, another endpoint's or partition's), or
    its endpoint is not one of this app's in token mode, the only mode with a token claim to
    cancel by. In a handler (``ctx.cancel``) or at the endpoint that receives the cancel, the
    message is parked with this reason; a client is answered 409."""


class ConflictRetriesExhausted(BusError):
    """Optimistic-concurrency conflicts kept recurring within one invocation; the host will
    redeliver the message later."""


class IdempotencyKeyReused(BusError, ValueError):
    """An idempotency key already names a different message (another type, destination, body
    or due time) for this sender within the ingress window: the request is refused rather
    than answered with that message's receipt. The text names the key, never the other
    message's content (HTTP 409, ``bus send`` exit 2, a rejected bulk row)."""


class SessionConflict(BusError):
    """A transactional session's commit lost to another writer: another request under the
    same key committed the session first, or a row the session wrote changed since it was
    read (``shared.bus.session``). Nothing of this request was written or sent; a retry of
    the request finds out which (HTTP 409 for a web request)."""


class ProviderUnavailable(BusError):
    """An external service's call did not give a usable answer: refused connection, timeout,
    dropped connection, 429 or 5xx. Its outcome is unknown, so the performer retries it under
    the endpoint's retry policy with the same idempotency key (``docs/effects.md``)."""


class ProviderNotReached(ProviderUnavailable):
    """The connection to the service could not be opened (refused, no such host, a TLS
    handshake that failed): no byte of the request was sent, so the provider cannot have
    applied it. Even an at-most-once service may be called again after this."""


class EffectInProgress(ProviderUnavailable):
    """The provider answered that a call under the same idempotency key is still running (a
    racing performer copy, or a retry after a timeout while the provider still works): what
    that call does is not known yet, so the effect is retried with the same key, whose answer
    the provider gives once it is done (``docs/effects.md``, section 3)."""


class AnswerUnusable(ProviderUnavailable):
    """The call reached the provider and an answer came back, but not one the bus can use:
    too large, not a JSON object, a redirect. Its outcome is unknown (the provider may have
    applied the call), so an idempotent service is retried with the same key and an
    at-most-once service's answer is ``uncertain``."""


class UndeclaredService(PermanentFailure):
    """An effect request names a service the app does not declare, or an answer type that is
    not an ``EffectAnswered``: no message can make the bus call what the app did not declare.
    Parked with this reason."""


class NoReplyAddress(PermanentFailure):
    """``ctx.reply`` for a message whose sender is no endpoint (a client through the HTTP
    ingress or the CLI): nothing can take the reply. Parked with this reason."""


class NotASaga(PermanentFailure):
    """A saga's operation (``ctx.complete``) where no saga instance is being handled: at an
    ordinary endpoint, or in a saga's not-found handler. Parked with this reason."""


class EffectKeyConflict(PermanentFailure):
    """The provider refused an idempotency key as already used with another body. The bus
    sends one body per key, so this is a defect (or a key shared with another client), never
    retried: parked with this reason."""


class KitError(BusError):
    """A test kit (``shared.testing``) was asked for something its app cannot give: a message
    at an endpoint where none waits, a service the app does not declare, an app that never
    becomes quiet."""
