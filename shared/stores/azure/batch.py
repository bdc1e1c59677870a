"""Table Storage entity-group transactions ($batch), encoded and decoded by the project.

The SDK's ``submit_transaction`` builds the multipart request with the standard library's
``email`` generator and parses the multipart answer with its parser. For the three-entity
commit that every message makes, that was about a third of a host's CPU in ``make bench``
(the ``email`` header machinery, plus a regular expression compiled per response because each
response has its own boundary). The wire format is small and fixed, so this module writes and
reads it with plain string operations. The request still goes through the SDK's HTTP pipeline
(authentication, retries, timeouts, transport), so only the body differs from the SDK's.

Wire format (Table service REST API, "Performing entity group transactions"): one
``multipart/mixed`` batch holding one ``multipart/mixed`` changeset, whose parts are
``application/http`` requests. The answer mirrors it with one HTTP response per operation, or a
single error response whose message starts with the failing operation's index (``"1:The
specified entity already exists."``).
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

from shared.errors import InvalidValue, StorageError
from shared.stores.table import Delete, Entity, Insert, TableOperation, TableValue, Update

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
"""Integers outside this range are typed ``Edm.Int64``; inside it the JSON number is read
back as ``Edm.Int32``."""
_CRLF = "\r\n"


class MalformedBatchResponse(StorageError):
    """The service answered a transaction with a body this module cannot read."""


@dataclass(frozen=True)
class PartResponse:
    """One operation's answer inside a batch response."""

    status: int
    headers: Mapping[str, str]
    """Lower-cased header names."""
    body: str

    @property
    def etag(self) -> str | None:
        return self.headers.get("etag")

    def error(self) -> tuple[str, str]:
        """The service's error code and message, or empty strings for an unreadable body."""
        try:
            detail = json.loads(self.body)["odata.error"]
            message = detail.get("message", "")
            if isinstance(message, dict):
                message = message.get("value", "")
            return str(detail.get("code", "")), str(message)
        except (ValueError, KeyError, TypeError):
            return "", self.body

    def failed_index(self, operations: int) -> int:
        """The failing operation's position, from the ``"<index>:"`` prefix of the message
        (0 when absent or out of range, as the service uses for whole-batch errors)."""
        _, message = self.error()
        head, _, _ = message.partition(":")
        if head.strip().isdigit() and int(head) < operations:
            return int(head)
        return 0


def _json_value(name: str, value: TableValue, out: dict[str, object]) -> None:
    """One property in the service's JSON, with the ``@odata.type`` annotation where the
    JSON value alone would be read back as another type."""
    if isinstance(value, bool):
        out[name] = value
    elif isinstance(value, int):
        if INT32_MIN <= value <= INT32_MAX:
            out[name] = value
        else:
            out[name] = str(value)
            out[name + "@odata.type"] = "Edm.Int64"
    elif isinstance(value, float):
        if math.isnan(value):
            out[name] = "NaN"
        elif math.isinf(value):
            out[name] = "Infinity" if value > 0 else "-Infinity"
        else:
            out[name] = value
        out[name + "@odata.type"] = "Edm.Double"
    elif isinstance(value, str):
        out[name] = value
    elif isinstance(value, bytes):
        out[name] = base64.b64encode(value).decode("ascii")
        out[name + "@odata.type"] = "Edm.Binary"
    elif isinstance(value, datetime):
        # normalise_entity has already refused naive datetimes and moved the rest to UTC.
        out[name] = value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        out[name + "@odata.type"] = "Edm.DateTime"
    else:
        raise InvalidValue(f"property {name!r}: unsupported type {type(value).__name__}")


def entity_json(entity: Entity) -> str:
    """The entity as the JSON body of an insert or replace (already normalised)."""
    body: dict[str, object] = {"PartitionKey": entity.partition_key, "RowKey": entity.row_key}
    for name, value in entity.properties.items():
        _json_value(name, value, body)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def _entity_url(table_url: str, partition_key: str, row_key: str) -> str:
    def key(value: str) -> str:
        return quote(value.replace("'", "''"), safe="")

    return f"{table_url}(PartitionKey='{key(partition_key)}',RowKey='{key(row_key)}')"


def _part(index: int, request_line: str, headers: list[str], body: str) -> str:
    lines = [
        "Content-Type: application/http",
        "Content-Transfer-Encoding: binary",
        f"Content-ID: {index}",
        "",
        request_line,
        *headers,
        "",
        body,
    ]
    return _CRLF.join(lines)


@dataclass(frozen=True)
class EncodedBatch:
    content_type: str
    body: bytes


def encode_batch(table_url: str, operations: Sequence[TableOperation]) -> EncodedBatch:
    """The request body of one transaction on the table at ``table_url``
    (``https://<account>.table.core.windows.net/<table>``). Entities must be normalised."""
    batch = f"batch_{uuid.uuid4()}"
    changeset = f"changeset_{uuid.uuid4()}"
    common = ["DataServiceVersion: 3.0", "Accept: application/json;odata=nometadata"]
    parts: list[str] = []
    for index, op in enumerate(operations):
        if isinstance(op, Insert):
            body = entity_json(op.entity)
            headers = [
                "Content-Type: application/json",
                "Prefer: return-no-content",
                *common,
            ]
            parts.append(_part(index, f"POST {table_url} HTTP/1.1", headers, body))
        elif isinstance(op, Delete):
            url = _entity_url(table_url, op.partition_key, op.row_key)
            headers = [*common, f"If-Match: {op.etag or '*'}"]
            parts.append(_part(index, f"DELETE {url} HTTP/1.1", headers, ""))
        else:
            # Update (If-Match its ETag, or * for any version) and Upsert (no If-Match) are
            # both a replace (PUT), as the interface defines them.
            url = _entity_url(table_url, op.entity.partition_key, op.entity.row_key)
            headers = ["Content-Type: application/json", *common]
            if isinstance(op, Update):
                headers.append(f"If-Match: {op.etag or '*'}")
            parts.append(_part(index, f"PUT {url} HTTP/1.1", headers, entity_json(op.entity)))
    changeset_body = "".join(f"--{changeset}{_CRLF}{p}{_CRLF}" for p in parts)
    text = (
        f"--{batch}{_CRLF}"
        f"Content-Type: multipart/mixed; boundary={changeset}{_CRLF}{_CRLF}"
        f"{changeset_body}--{changeset}--{_CRLF}{_CRLF}"
        f"--{batch}--{_CRLF}"
    )
    return EncodedBatch(f"multipart/mixed; boundary={batch}", text.encode("utf-8"))


def boundary_of(content_type: str) -> str:
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary" and value:
            return value.strip('"')
    raise MalformedBatchResponse(f"batch response without a boundary: {content_type!r}")


def split_headers(text: str) -> tuple[dict[str, str], str]:
    """Headers (lower-cased names) and what follows the blank line after them."""
    head, separator, rest = text.partition(_CRLF + _CRLF)
    if not separator:
        head, rest = text, ""
    headers: dict[str, str] = {}
    for line in head.split(_CRLF):
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return headers, rest


def multipart_parts(body: str, boundary: str) -> list[str]:
    delimiter = "--" + boundary
    end = body.find(delimiter + "--")
    if end < 0:
        raise MalformedBatchResponse("batch response is not terminated")
    pieces = body[:end].split(delimiter)[1:]
    # Each piece starts with the CRLF that ends the delimiter line.
    return [p[2:] if p.startswith(_CRLF) else p for p in pieces]


def http_response(text: str) -> PartResponse:
    status_line, _, rest = text.partition(_CRLF)
    fields = status_line.split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].isdigit():
        raise MalformedBatchResponse(f"not an HTTP response line: {status_line[:80]!r}")
    headers, body = split_headers(rest)
    return PartResponse(int(fields[1]), headers, body.rstrip(_CRLF))


def decode_batch(content_type: str, body: bytes) -> list[PartResponse]:
    """Every operation's answer, in order (one error answer when the service rejected it)."""
    responses: list[PartResponse] = []

    def walk(text: str, boundary: str) -> None:
        for piece in multipart_parts(text, boundary):
            headers, rest = split_headers(piece)
            part_type = headers.get("content-type", "")
            if part_type.lower().startswith("multipart/mixed"):
                walk(rest, boundary_of(part_type))
            else:
                responses.append(http_response(rest))

    walk(body.decode("utf-8"), boundary_of(content_type))
    return responses
