"""The project's own encoding of table transactions: the parts Azurite does not exercise."""

from __future__ import annotations

import pytest

from shared.stores.azure.batch import (
    MalformedBatchResponse,
    decode_batch,
    encode_batch,
    entity_json,
)
from shared.stores.table import Delete, Entity, Insert, Update

CRLF = "\r\n"


def _response(*parts: str, boundary: str = "batchresponse_1") -> tuple[str, bytes]:
    changeset = "changesetresponse_2"
    inner = "".join(
        f"--{changeset}{CRLF}Content-Type: application/http{CRLF}"
        f"Content-Transfer-Encoding: binary{CRLF}{CRLF}{p}{CRLF}"
        for p in parts
    )
    body = (
        f"--{boundary}{CRLF}Content-Type: multipart/mixed; boundary={changeset}{CRLF}{CRLF}"
        f"{inner}--{changeset}--{CRLF}--{boundary}--{CRLF}"
    )
    return f'multipart/mixed; boundary="{boundary}"', body.encode()


def test_every_answer_is_read_in_order_with_its_etag() -> None:
    content_type, body = _response(
        f'HTTP/1.1 204 No Content{CRLF}ETag: W/"one"{CRLF}{CRLF}',
        f'HTTP/1.1 204 No Content{CRLF}etag: W/"two"{CRLF}{CRLF}',
        f"HTTP/1.1 204 No Content{CRLF}{CRLF}",
    )
    parts = decode_batch(content_type, body)
    assert [(p.status, p.etag) for p in parts] == [(204, 'W/"one"'), (204, 'W/"two"'), (204, None)]


def test_an_error_answer_names_the_failing_operation_and_its_code() -> None:
    error = (
        '{"odata.error":{"code":"EntityAlreadyExists","message":'
        '{"lang":"en-US","value":"2:The specified entity already exists."}}}'
    )
    content_type, body = _response(
        f"HTTP/1.1 409 Conflict{CRLF}Content-Type: application/json{CRLF}{CRLF}{error}"
    )
    [part] = decode_batch(content_type, body)
    assert part.status == 409
    assert part.error() == ("EntityAlreadyExists", "2:The specified entity already exists.")
    assert part.failed_index(3) == 2
    assert part.failed_index(2) == 0  # out of range: a whole-batch error


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("multipart/mixed", b"--x\r\n"),
        ("multipart/mixed; boundary=x", b"--x\r\n\r\nHTTP/1.1 204\r\n\r\n"),
        ("multipart/mixed; boundary=x", b"--x\r\n\r\nnot http\r\n--x--\r\n"),
    ],
)
def test_an_unreadable_answer_is_a_clear_error(content_type: str, body: bytes) -> None:
    with pytest.raises(MalformedBatchResponse):
        decode_batch(content_type, body)


def test_the_request_keeps_keys_escaped_and_conditions_per_operation() -> None:
    encoded = encode_batch(
        "http://host/acct/t",
        [
            Insert(Entity("p", "a", {"n": 2**40})),
            Update(Entity("p", "it's", {}), etag='W/"e1"'),
            Delete("p", "a|b"),
        ],
    ).body.decode()
    assert "POST http://host/acct/t HTTP/1.1" in encoded
    assert "PUT http://host/acct/t(PartitionKey='p',RowKey='it%27%27s') HTTP/1.1" in encoded
    assert "DELETE http://host/acct/t(PartitionKey='p',RowKey='a%7Cb') HTTP/1.1" in encoded
    assert 'If-Match: W/"e1"' in encoded
    assert "If-Match: *" in encoded
    assert '"n":"1099511627776","n@odata.type":"Edm.Int64"' in encoded


def test_entity_json_types_what_json_alone_would_lose() -> None:
    text = entity_json(Entity("p", "r", {"f": 2.0, "nan": float("nan"), "b": b"\x01"}))
    assert '"f":2.0,"f@odata.type":"Edm.Double"' in text
    assert '"nan":"NaN"' in text
    assert '"b":"AQ==","b@odata.type":"Edm.Binary"' in text
