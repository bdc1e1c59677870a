"""JSON documents addressed by key, each replaced only while unchanged: what an endpoint's rows
need of a document store (``shared.bus.state.document_rows`` keeps a partition's rows in one
document). Cosmos DB (``shared.stores.cosmos``), Blob Storage (``shared.stores.blob_documents``)
and the in-memory model of both (``shared.stores.memory.documents``) provide it;
``tests/contract/test_documents_contract.py`` runs the contract on each:

- ``read`` returns a document and its ETag, or None when absent;
- ``create`` writes one only if absent (AlreadyExists otherwise);
- ``replace`` writes one and ``delete`` removes one only while its ETag is the one given
  (PreconditionFailed if it changed or is gone);
- ``page`` lists documents in key order with their contents, from an opaque continuation;
- a document is at most ``max_bytes`` as UTF-8 JSON (``TooLarge`` before anything is sent).

ETags are opaque: compare them only for equality. Keys are ``document_key`` names: ASCII
letters, digits, ``_``, ``-`` and ``~``, valid as a blob name and as a Cosmos DB item id.
"""

from __future__ import annotations

import abc
import hashlib
import json
import string
from dataclasses import dataclass
from typing import Any

from shared.errors import InvalidValue, TooLarge

MAX_DOCUMENT_KEY = 200
"""Characters of a document key: a key that would be longer is named by its hash instead
(Cosmos DB ids hold 1,023 bytes, blob names 1,024 characters with their folder)."""
_PLAIN = frozenset(string.ascii_letters + string.digits + "_-")


def document_key(partition_key: str) -> str:
    """The document of a partition: its key with every character but ASCII letters, digits,
    ``_`` and ``-`` escaped as ``~`` and two hex digits per UTF-8 byte, so that keys of plain
    characters keep their order; ``~e`` for the empty key; ``~h`` and a SHA-256 for a key
    that would be longer than ``MAX_DOCUMENT_KEY``. No two partition keys share a document
    key (the escapes are upper-case hex, so ``~e`` and ``~h`` are no escape)."""
    if not partition_key:
        return "~e"
    escaped = "".join(
        c if c in _PLAIN else "".join(f"~{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
        for c in partition_key
    )
    if len(escaped) <= MAX_DOCUMENT_KEY:
        return escaped
    return "~h" + hashlib.sha256(partition_key.encode("utf-8", "surrogatepass")).hexdigest()


def check_document_key(key: str) -> str:
    """Refuse a key ``document_key`` cannot have made (it would not be a safe id or name)."""
    if not key or len(key) > MAX_DOCUMENT_KEY + 2 or not set(key) <= _PLAIN | {"~"}:
        raise InvalidValue(f"not a document key: {key[:80]!r}")
    return key


def document_bytes(content: dict[str, Any]) -> bytes:
    """A document as stored: compact UTF-8 JSON."""
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def check_size(key: str, data: bytes, max_bytes: int, kind: str) -> None:
    if len(data) > max_bytes:
        raise TooLarge(
            f"document {key!r} would be {len(data):,} bytes; {kind} holds {max_bytes:,} a document"
        )


@dataclass(frozen=True)
class StoredDocument:
    """A document's key, content and the ETag it had when read. ``content`` is None and
    ``damage`` says why when what is stored is not a JSON object (anyone who may write to the
    store can put anything there): the reader decides what that means."""

    key: str
    content: dict[str, Any] | None
    etag: str
    damage: str | None = None
    size: int | None = None
    """Its size as stored, in bytes, where the store says (None: unknown)."""


def parsed_document(key: str, data: bytes, etag: str) -> StoredDocument:
    """A stored document from its bytes: its content, or why it has none."""
    try:
        content = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        return StoredDocument(key, None, etag, f"not JSON: {e}", len(data))
    if not isinstance(content, dict):
        return StoredDocument(key, None, etag, "not a JSON object", len(data))
    return StoredDocument(key, content, etag, size=len(data))


@dataclass(frozen=True)
class DocumentPage:
    """One page of documents in key order and where the next starts (None: the last)."""

    documents: list[StoredDocument]
    continuation: str | None


class Documents(abc.ABC):
    """One endpoint's documents. ``name`` is the endpoint; ``kind`` names the store in logs,
    errors and operation counts; ``max_bytes`` is the largest document it holds."""

    name: str
    kind: str
    max_bytes: int

    @abc.abstractmethod
    async def read(self, key: str) -> StoredDocument | None:
        """The document and its ETag; None if absent."""

    @abc.abstractmethod
    async def create(self, key: str, content: dict[str, Any]) -> str:
        """Write the document only if absent; returns its ETag. AlreadyExists otherwise."""

    @abc.abstractmethod
    async def replace(self, key: str, content: dict[str, Any], etag: str) -> str:
        """Write the document only while its ETag is ``etag``; returns the new ETag.
        PreconditionFailed if it changed or is gone."""

    @abc.abstractmethod
    async def delete(self, key: str, etag: str) -> None:
        """Remove the document only while its ETag is ``etag``. PreconditionFailed if it
        changed or is gone."""

    @abc.abstractmethod
    async def page(self, continuation: str | None, page_size: int) -> DocumentPage:
        """At most ``page_size`` documents in key order, from where ``continuation`` (opaque,
        the store's own; None: the first) says, and where the next page starts."""

    def encoded(self, key: str, content: dict[str, Any]) -> bytes:
        """``content`` as stored, refused (``TooLarge``) before anything is sent when it
        exceeds ``max_bytes``."""
        check_document_key(key)
        data = document_bytes(content)
        check_size(key, data, self.max_bytes, self.kind)
        return data
