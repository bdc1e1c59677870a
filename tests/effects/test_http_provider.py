"""The HTTP provider against real servers on 127.0.0.1: what it sends, and every answer a
broken or hostile provider could give (``shared.effects.http``)."""

from __future__ import annotations

import asyncio
import gzip
import json
import tracemalloc
from collections.abc import AsyncIterator

import pytest

from shared.bus.effects import ServiceDeclaration
from shared.effects.addresses import Credential, ServiceAddress
from shared.effects.http import MAX_DEPTH, HttpClient, HttpProvider
from shared.effects.provider import ProviderAnswer
from shared.errors import AnswerUnusable, ProviderNotReached, ProviderUnavailable
from tests.effects.http_servers import (
    Conversation,
    KeyedProvider,
    head,
    raw_server,
    read_request,
    serving,
)

SECRET = "sk_test_do_not_show_4242"
LIMIT = 1024
PAYMENTS = ServiceDeclaration("payments", {"charge": "/v1/charges"})


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    opened = HttpClient()
    yield opened
    await opened.close()


def provider(
    client: HttpClient,
    url: str,
    *,
    credential: str | None = SECRET,
    service: ServiceDeclaration = PAYMENTS,
) -> HttpProvider:
    address = ServiceAddress(url, None if credential is None else Credential(credential))
    return HttpProvider(service, address, client, max_bytes=LIMIT)


async def charge(client: HttpClient, url: str) -> ProviderAnswer:
    async with asyncio.timeout(10):  # a hang is a failure, never a stuck suite
        return await provider(client, url).call("charge", {"amount": 1200}, "key-1")


def answering(status: str, body: bytes, *headers: str) -> Conversation:
    async def conversation(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(head(status, f"Content-Length: {len(body)}", *headers) + body)
        await writer.drain()

    return conversation


async def test_a_call_posts_the_json_body_with_the_key_and_the_credential(
    client: HttpClient,
) -> None:
    async with serving(KeyedProvider()) as server:
        answer = await charge(client, server.url)
    assert answer == ProviderAnswer(200, {"id": "ch_1", "body": {"amount": 1200}})
    [received] = server.received
    assert received.path == "/v1/charges"
    assert json.loads(received.body) == {"amount": 1200}
    assert received.headers["content-type"] == "application/json"
    assert received.headers["idempotency-key"] == "key-1"
    assert received.headers["authorization"] == f"Bearer {SECRET}"


async def test_without_a_credential_no_authorization_is_sent_and_the_header_is_declared(
    client: HttpClient,
) -> None:
    service = ServiceDeclaration("ledger", {"post": "/entries"}, idempotency_header="X-Request-Id")
    async with serving(KeyedProvider()) as server:
        await provider(client, server.url, credential=None, service=service).call(
            "post", {"n": 1}, "key-9"
        )
    [received] = server.received
    assert received.path == "/entries"
    assert received.headers["x-request-id"] == "key-9"
    assert "authorization" not in received.headers


async def test_a_retry_with_the_same_key_gets_the_first_answer(client: HttpClient) -> None:
    async with serving(KeyedProvider()) as server:
        first, second = await charge(client, server.url), await charge(client, server.url)
    assert first == second
    assert server.ledger == ["key-1"]


async def test_an_endless_answer_is_cut_at_the_limit_and_memory_stays_small(
    client: HttpClient,
) -> None:
    chunk = b"x" * 65536

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await server.write(writer, head("200 OK", "Content-Type: application/json"))
        while True:
            await server.write(writer, chunk)

    async with raw_server(endless) as server:
        tracemalloc.start()
        try:
            with pytest.raises(AnswerUnusable, match=f"larger than {LIMIT} bytes"):
                await charge(client, server.url)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak


async def test_a_50_mib_answer_is_refused_by_its_length_before_it_is_read(
    client: HttpClient,
) -> None:
    size = 50 * 1024 * 1024

    async def huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await server.write(writer, head("200 OK", f"Content-Length: {size}"))
        for _ in range(size // 65536):
            await server.write(writer, b"x" * 65536)

    async with raw_server(huge) as server:
        with pytest.raises(AnswerUnusable, match="larger than"):
            await charge(client, server.url)
    assert server.sent < size // 2


NESTED = b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"id": "ch_1", ', "not JSON"),
        (b'["ch_1"]', "a JSON list, not an object"),
        (b'"ch_1"', "a JSON str, not an object"),
        (b'{"id": "\xff\xfe"}', "not UTF-8"),
        (b'{"amount": NaN}', "not JSON"),
        (b'{"amount": Infinity}', "not JSON"),
        (NESTED, f"nested more than {MAX_DEPTH} levels"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "larger than"),
        (b"", "not JSON"),
    ],
)
async def test_an_answer_that_is_not_one_json_object_is_unusable(
    client: HttpClient, body: bytes, why: str
) -> None:
    async with raw_server(answering("200 OK", body)) as server:
        with pytest.raises(AnswerUnusable, match=why):
            await charge(client, server.url)


async def test_a_deeply_nested_answer_within_the_limit_is_unusable(client: HttpClient) -> None:
    deep = b"[" * 500 + b"]" * 500
    body = b'{"a":' + deep + b"}"
    async with raw_server(answering("200 OK", body)) as server:
        client_provider = HttpProvider(
            PAYMENTS, ServiceAddress(server.url), client, max_bytes=len(body)
        )
        with pytest.raises(AnswerUnusable, match="nested"):
            await client_provider.call("charge", {}, "k")


async def test_a_compressed_answer_is_unusable(client: HttpClient) -> None:
    body = gzip.compress(b'{"id": "' + b"x" * 100_000 + b'"}')
    async with raw_server(answering("200 OK", body, "Content-Encoding: gzip")) as server:
        with pytest.raises(AnswerUnusable, match="compressed"):
            await charge(client, server.url)


async def test_a_redirect_is_not_followed_and_the_other_address_sees_nothing(
    client: HttpClient,
) -> None:
    async with serving(KeyedProvider()) as elsewhere:
        moved = answering("307 Temporary Redirect", b"", f"Location: {elsewhere.url}/v1/charges")
        async with raw_server(moved) as server:
            with pytest.raises(AnswerUnusable, match="307, a redirect"):
                await charge(client, server.url)
    assert elsewhere.received == []


async def test_a_connection_dropped_after_the_request_is_an_unknown_outcome(
    client: HttpClient,
) -> None:
    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async with raw_server(drop) as server:
        with pytest.raises(ProviderUnavailable) as failed:
            await charge(client, server.url)
    assert not isinstance(failed.value, AnswerUnusable | ProviderNotReached)
    assert "after the request was sent" in str(failed.value)


async def test_a_refused_connection_sent_nothing(client: HttpClient) -> None:
    async with raw_server(answering("200 OK", b"{}")) as server:
        url = server.url
    with pytest.raises(ProviderNotReached, match="could not connect"):
        await charge(client, url)


@pytest.mark.parametrize("status", ["503 Service Unavailable", "429 Too Many Requests"])
async def test_a_transient_status_needs_no_json_body(client: HttpClient, status: str) -> None:
    body = b"<html>busy</html>"
    async with raw_server(answering(status, body)) as server:
        answer = await charge(client, server.url)
    assert answer == ProviderAnswer(int(status[:3]), {})


@pytest.mark.parametrize("status", ["409 Conflict", "422 Unprocessable Entity"])
async def test_an_in_progress_or_key_reused_status_needs_no_json_body(
    client: HttpClient, status: str
) -> None:
    """Classified by status (the defaults: 409 in progress, 422 key reused), body unread."""
    async with raw_server(answering(status, b"<html>conflict</html>")) as server:
        answer = await charge(client, server.url)
    assert answer == ProviderAnswer(int(status[:3]), {})


async def test_the_statuses_a_service_declares_are_the_ones_whose_body_is_not_read(
    client: HttpClient,
) -> None:
    declared = ServiceDeclaration(
        "payments", {"charge": "/v1/charges"}, in_progress_statuses={425}, key_reused_statuses=()
    )
    async with raw_server(answering("425 Too Early", b"<html>wait</html>")) as server:
        early = await provider(client, server.url, service=declared).call("charge", {}, "k")
    async with raw_server(answering("422 Unprocessable Entity", b"<html>no</html>")) as server:
        with pytest.raises(AnswerUnusable, match="not JSON"):
            await provider(client, server.url, service=declared).call("charge", {}, "k")
    assert early == ProviderAnswer(425, {})


async def test_a_refusal_keeps_its_json_body(client: HttpClient) -> None:
    body = b'{"error": "card_declined"}'
    async with raw_server(answering("402 Payment Required", body)) as server:
        answer = await charge(client, server.url)
    assert answer == ProviderAnswer(402, {"error": "card_declined"})


async def test_provider_text_in_an_error_is_escaped_and_bounded(client: HttpClient) -> None:
    async def lying(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: x\nforged: line" + b"y" * 5000)
        await writer.drain()

    async with raw_server(lying) as server:
        with pytest.raises(ProviderUnavailable) as failed:
            await charge(client, server.url)
    text = str(failed.value)
    assert "\n" not in text
    assert "\r" not in text
    assert len(text) < 600


async def test_endless_headers_are_refused_and_memory_stays_small(client: HttpClient) -> None:
    async def headers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await server.write(writer, b"HTTP/1.1 200 OK\r\n")
        for number in range(1_000_000):
            await server.write(writer, b"X-Filler-%d: %s\r\n" % (number, b"a" * 4000))

    async with raw_server(headers) as server:
        tracemalloc.start()
        try:
            with pytest.raises(ProviderUnavailable, match="Too many headers"):
                await charge(client, server.url)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak
