"""Hostile input, written as an attacker with queue send access or an HTTP client would:
queue messages (raw text or base64, the way they sit on the wire) and raw HTTP requests.

Everything is generated from a seed, so a failing run can be replayed exactly. Nothing here
knows what the bus does with the input; ``test_hostile_traffic`` checks that.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass

_UUID = "0f0e0d0c-0b0a-4908-8706-050403020100"
FORBIDDEN_KEYS = ["a/b", "a\\b", "a#b", "a?b", "a\x01b", "tab\there", "x" * 1025, "del\x7f"]


@dataclass(frozen=True)
class Wire:
    """One queue message as the service stores it: ``text`` goes on the wire unchanged
    (``base64`` only says whether it decodes as base64, for the report)."""

    kind: str
    text: str
    base64: bool


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64_text(text: str) -> Wire:
    return Wire("", _b64(text.encode("utf-8")), True)


def signal(token: str, *, partition_key: str = "p", **extra: object) -> str:
    """A signal whose ids agree with ``token`` when it is inside the naming scheme."""
    parts = token.split("/")
    message_id = parts[3] if len(parts) > 3 else _UUID
    attempt_id = parts[2] if len(parts) > 2 else _UUID
    return json.dumps(
        {
            "message_id": message_id,
            "attempt_id": attempt_id,
            "token": token,
            "partition_key": partition_key,
            **extra,
        }
    )


def _ids(rng: random.Random) -> tuple[str, str, str]:
    def one() -> str:
        return "-".join(
            "".join(rng.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12)
        )

    return one(), one(), one()


def queue_messages(rng: random.Random, endpoint: str, count: int) -> Iterator[Wire]:
    """``count`` hostile messages for ``endpoint``'s queue, cycling through every kind."""
    makers = [
        _random_bytes,
        _non_ascii_raw,
        _invalid_json,
        _wrong_types,
        _deep_json,
        _path_traversal,
        _forbidden_partition_key,
        _trailing_newline,
        _oversized_raw,
        _oversized_base64,
        _empty,
        _foreign_sender,
    ]
    for n in range(count):
        maker = makers[n % len(makers)]
        wire = maker(rng, endpoint)
        yield Wire(maker.__name__.strip("_"), wire.text, wire.base64)


def _random_bytes(rng: random.Random, _: str) -> Wire:
    return Wire("", _b64(rng.randbytes(rng.randint(1, 400))), True)


def _non_ascii_raw(rng: random.Random, _: str) -> Wire:
    alphabet = "äöüßéèñçøå€☃𝄞漢字ĳ"
    return Wire("", "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80))), False)


def _invalid_json(rng: random.Random, _: str) -> Wire:
    text = rng.choice(['{"message_id": ', "{'a': 1}", "[1, 2", "nul", "{]", '"\\ud800"'])
    return _b64_text(text) if rng.random() < 0.5 else Wire("", text, False)


def _wrong_types(rng: random.Random, _: str) -> Wire:
    m, a, o = _ids(rng)
    token = f"client/{o}/{a}/{m}"
    choices = [
        json.dumps({"message_id": 1, "attempt_id": a, "token": token, "partition_key": "p"}),
        json.dumps([m, a, token]),
        json.dumps(None),
        json.dumps("a string"),
        json.dumps({"message_id": m, "attempt_id": a, "token": None, "partition_key": 7}),
        signal(token, etag=["x"], envelope={"id": m}),
    ]
    return _b64_text(rng.choice(choices))


def _deep_json(rng: random.Random, _: str) -> Wire:
    depth = rng.randint(2000, 5000)
    return _b64_text("[" * depth + "]" * depth)


def _path_traversal(rng: random.Random, endpoint: str) -> Wire:
    m, a, o = _ids(rng)
    token = rng.choice(
        [
            f"../../{endpoint}/{o}/{a}/{m}",
            f"client/{o}/../{a}/{m}",
            f"client/{o}/{a}/{m}/../../x",
            f"/client/{o}/{a}/{m}",
            f"client/{o}/{a}/{m}/",
            f"topics/{o}/{a}/{m}",
        ]
    )
    return _b64_text(signal(token))


def _forbidden_partition_key(rng: random.Random, _: str) -> Wire:
    m, a, o = _ids(rng)
    return _b64_text(signal(f"client/{o}/{a}/{m}", partition_key=rng.choice(FORBIDDEN_KEYS)))


def _trailing_newline(rng: random.Random, _: str) -> Wire:
    m, a, o = _ids(rng)
    return _b64_text(signal(f"client/{o}/{a}/{m}\n"))


def _oversized_raw(rng: random.Random, _: str) -> Wire:
    return Wire("", "!" * rng.randint(49_000, 60_000), False)


def _oversized_base64(rng: random.Random, _: str) -> Wire:
    return Wire("", _b64(b"{" * rng.randint(40_000, 47_000)), True)


def _empty(rng: random.Random, _: str) -> Wire:
    return Wire("", rng.choice(["", " ", "=", "===="]), False)


def _foreign_sender(rng: random.Random, _: str) -> Wire:
    """A plausible name of another sender's token (which does not exist)."""
    m, a, o = _ids(rng)
    return _b64_text(signal(f"payments/{o}/{a}/{m}/{'A' * 43}", partition_key="order-1"))


@dataclass(frozen=True)
class Request:
    kind: str
    head: bytes
    body: bytes = b""
    send_body: bool = True
    """False: declare the body's length and never send it (a client that stalls)."""
    answer_before_body: bool = False
    """The host must answer from the head alone: the body is sent only if it does not."""


def http_requests(rng: random.Random, key: str, count: int) -> Iterator[Request]:
    """``count`` hostile requests to the ingress, authorised with function key ``key``."""
    makers = [
        _not_json,
        _deep_nesting,
        _bad_idempotency_key,
        _non_utf8_idempotency_key,
        _bad_partition_key,
        _unknown_type,
        _schema_violation,
        _huge_declared_body,
        _stalled_body,
        _garbage_request_line,
        _wrong_method,
    ]
    for n in range(count):
        maker = makers[n % len(makers)]
        request = maker(rng, key)
        yield Request(
            maker.__name__.strip("_"),
            request.head,
            request.body,
            request.send_body,
            request.answer_before_body,
        )


def _post(
    key: str,
    body: bytes,
    *,
    idempotency_key: bytes = b"",
    length: int | None = None,
    path: bytes = b"/api/messages",
) -> tuple[bytes, bytes]:
    headers = [
        b"POST " + path + b" HTTP/1.1",
        b"Host: 127.0.0.1",
        b"x-functions-key: " + key.encode(),
        b"Content-Type: application/json",
        b"Content-Length: " + str(len(body) if length is None else length).encode(),
        b"Connection: close",
    ]
    if idempotency_key:
        headers.append(b"Idempotency-Key: " + idempotency_key)
    return b"\r\n".join(headers) + b"\r\n\r\n", body


def _order(rng: random.Random, **changes: object) -> bytes:
    body: dict[str, object] = {
        "type": "PlaceOrder",
        "to": "orders",
        "body": {"order_id": f"o{rng.randint(0, 10**9)}", "customer": "eve", "amount_cents": 1},
    }
    body.update(changes)
    return json.dumps(body).encode()


def _unique_key(rng: random.Random) -> bytes:
    return f"hostile-{rng.randint(0, 10**12)}".encode()


def _not_json(rng: random.Random, key: str) -> Request:
    body = rng.choice([b"{", b"not json", b"\xff\xfe\x00", b'{"type": "PlaceOrder", "to": 1}'])
    return Request("", *_post(key, body, idempotency_key=_unique_key(rng)))


def _deep_nesting(rng: random.Random, key: str) -> Request:
    depth = rng.randint(5_000, 50_000)
    body = b'{"type": "PlaceOrder", "body": ' + b"[" * depth + b"]" * depth + b"}"
    return Request("", *_post(key, body, idempotency_key=_unique_key(rng)))


def _bad_idempotency_key(rng: random.Random, key: str) -> Request:
    bad = rng.choice([b"a/b", b"a#b", b"a?b", b"a\\b", b"x" * 201, b"tab\tin"])
    return Request("", *_post(key, _order(rng), idempotency_key=bad))


def _non_utf8_idempotency_key(rng: random.Random, key: str) -> Request:
    return Request("", *_post(key, _order(rng), idempotency_key=b"k\xff\xfe" + _unique_key(rng)))


def _bad_partition_key(rng: random.Random, key: str) -> Request:
    order = {"order_id": rng.choice(FORBIDDEN_KEYS), "customer": "eve", "amount_cents": 1}
    return Request("", *_post(key, _order(rng, body=order), idempotency_key=_unique_key(rng)))


def _unknown_type(rng: random.Random, key: str) -> Request:
    body = _order(rng, type=rng.choice(["DropTables", "", "../x", "PlaceOrder\n"]))
    return Request("", *_post(key, body, idempotency_key=_unique_key(rng)))


def _schema_violation(rng: random.Random, key: str) -> Request:
    order = {"order_id": "o1", "customer": "eve", "amount_cents": "lots", "extra": 1}
    return Request("", *_post(key, _order(rng, body=order), idempotency_key=_unique_key(rng)))


def _huge_declared_body(rng: random.Random, key: str) -> Request:
    """Declares 200 MB and sends 1 MB of it: the host must answer 413 without reading it all."""
    head, _ = _post(key, b"", idempotency_key=_unique_key(rng), length=200 * 1024 * 1024)
    return Request("", head, b"[" * (1024 * 1024), answer_before_body=True)


def _stalled_body(rng: random.Random, key: str) -> Request:
    head, body = _post(key, _order(rng), idempotency_key=_unique_key(rng))
    return Request("", head, body, send_body=False)


def _garbage_request_line(rng: random.Random, key: str) -> Request:
    line = rng.choice([b"GARBAGE", b"POST /api/messages HTTP/9.9", b"\x00\x01\x02", b"GET /%zz"])
    return Request("", line + b"\r\nx-functions-key: " + key.encode() + b"\r\n\r\n")


def _wrong_method(rng: random.Random, key: str) -> Request:
    head, body = _post(key, _order(rng), idempotency_key=_unique_key(rng))
    return Request("", head.replace(b"POST", rng.choice([b"PUT", b"DELETE", b"PATCH"]), 1), body)
