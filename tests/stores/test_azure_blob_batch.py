"""The project's own Blob Batch body and the reading of its answer: the parts a well-behaved
service does not exercise (hostile or broken answers, smuggled headers)."""

from __future__ import annotations

import pytest

from shared.errors import InvalidValue
from shared.stores.azure.batch import MalformedBatchResponse
from shared.stores.azure.blob_batch import (
    SubRequest,
    SubResponse,
    decode_responses,
    encode_requests,
)

CRLF = "\r\n"


def _delete(path: str, etag: str = '"0x1"') -> SubRequest:
    return SubRequest("DELETE", path, {"If-Match": etag, "Content-Length": "0"})


def _answer(*parts: tuple[str | None, str], boundary: str = "batchresponse_7") -> tuple[str, bytes]:
    """A batch answer of (Content-ID, HTTP response) parts."""
    body = "".join(
        f"--{boundary}{CRLF}Content-Type: application/http{CRLF}"
        + (f"Content-ID: {content_id}{CRLF}" if content_id is not None else "")
        + f"{CRLF}{response}{CRLF}"
        for content_id, response in parts
    )
    return f"multipart/mixed; boundary={boundary}", f"{body}--{boundary}--{CRLF}".encode()


def _status(code: int, error: str = "") -> str:
    header = f"x-ms-error-code: {error}{CRLF}" if error else ""
    return f"HTTP/1.1 {code} Whatever{CRLF}{header}Content-Length: 0{CRLF}{CRLF}"


def test_the_body_uses_a_boundary_without_equals_and_numbers_its_parts() -> None:
    encoded = encode_requests([_delete("/c/a"), _delete("/c/b%20c?sv=1")])

    kind, _, boundary = encoded.content_type.partition("; boundary=")
    text = encoded.body.decode()
    assert kind == "multipart/mixed"
    assert boundary.startswith("batch_")
    assert "=" not in boundary
    assert text.startswith(f"--{boundary}{CRLF}")
    assert text.endswith(f"--{boundary}--{CRLF}")
    assert text.count("Content-ID: ") == 2
    assert f"Content-ID: 1{CRLF}{CRLF}DELETE /c/b%20c?sv=1 HTTP/1.1{CRLF}" in text
    assert f'If-Match: "0x1"{CRLF}Content-Length: 0{CRLF}{CRLF}--{boundary}' in text


@pytest.mark.parametrize(
    "request_",
    [
        _delete("/c/a", '"0x1"\r\nDELETE /c/other HTTP/1.1'),
        _delete("/c/a HTTP/1.1\r\nx: y"),
        SubRequest("DELETE", "/c/a", {"x-evil\nname": "v"}),
    ],
)
def test_a_line_break_in_a_sub_request_is_refused(request_: SubRequest) -> None:
    with pytest.raises(InvalidValue, match="line break"):
        encode_requests([_delete("/c/ok"), request_])


def test_answers_are_matched_to_requests_by_content_id() -> None:
    content_type, body = _answer(
        ("2", _status(404, "BlobNotFound")),
        ("0", _status(202)),
        ("1", _status(412, "ConditionNotMet")),
    )

    assert decode_responses(content_type, body, 3) == [
        SubResponse(202, ""),
        SubResponse(412, "ConditionNotMet"),
        SubResponse(404, "BlobNotFound"),
    ]


def test_answers_without_content_id_are_taken_in_order() -> None:
    content_type, body = _answer((None, _status(202)), (None, _status(412)))
    assert [a.status for a in decode_responses(content_type, body, 2)] == [202, 412]


@pytest.mark.parametrize(
    ("parts", "count"),
    [
        ([("0", _status(202))], 2),  # an answer missing
        ([("0", _status(202)), ("0", _status(202))], 2),  # one request answered twice
        ([("0", _status(202)), ("5", _status(202))], 2),  # a request never made
        ([("0", _status(202)), ("1", _status(202))], 1),  # more answers than requests
        ([("0", "HTTP/1.1 abc Bad\r\n\r\n")], 1),  # no status code
        ([("0", "<html>not http</html>")], 1),
    ],
)
def test_an_answer_that_does_not_fit_the_requests_is_malformed(
    parts: list[tuple[str | None, str]], count: int
) -> None:
    content_type, body = _answer(*parts)
    with pytest.raises(MalformedBatchResponse):
        decode_responses(content_type, body, count)


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("multipart/mixed", b"--x\r\n\r\nHTTP/1.1 202 A\r\n\r\n--x--\r\n"),  # no boundary
        ("multipart/mixed; boundary=x", b"--x\r\n\r\nHTTP/1.1 202 A\r\n\r\n"),  # unterminated
        ("application/xml", b"<Error><Code>InvalidInput</Code></Error>"),
    ],
)
def test_a_body_that_is_not_a_batch_answer_is_malformed(content_type: str, body: bytes) -> None:
    with pytest.raises(MalformedBatchResponse):
        decode_responses(content_type, body, 1)


def test_bytes_that_are_not_utf8_do_not_escape_as_a_decode_error() -> None:
    content_type, body = _answer(("0", _status(202)))
    assert decode_responses(content_type, body.replace(b"Whatever", b"\xff\xfe"), 1) == [
        SubResponse(202, "")
    ]


def test_a_unicode_digit_content_id_is_not_taken_for_a_number() -> None:
    content_type, body = _answer(("\u00b2", _status(202)))
    assert decode_responses(content_type, body, 1) == [SubResponse(202, "")]
