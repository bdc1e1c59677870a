"""The local host's HTTP front end and the ingress against hostile clients, over raw sockets
where the attack is in the bytes: a body that never arrives, one far over the limit, bytes
no header may hold, JSON nested past the parser's stack, partition keys Table Storage
refuses. Every answer is a JSON error that says what is wrong, none is a 500, and nothing
is sent."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared import runtime
from shared.provisioning import provision
from shared.settings import StorageSettings
from shared.stores.account import StorageAccount
from shared.stores.azure import AzureStorageAccount
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite

KEY = "hostile-fn-key"
LIMIT = 1024 * 1024
"""The host's request size limit in this module (``--max-request-bytes``)."""
BODY_SECONDS = 5.0
"""lab.host.http.BODY_READ_SECONDS, as a client measures it."""
HEADERS_SECONDS = 5.0
"""lab.host.http.HEADERS_SECONDS, as a client measures it."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float

    def json(self) -> dict[str, object]:
        assert self.headers.get("content-type", "").startswith("application/json"), self
        value = json.loads(self.body)
        assert isinstance(value, dict)
        return value


def read_reply(sock: socket.socket, started: float) -> Reply:
    """One HTTP response, read until its Content-Length or until the server closes."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed without a full response: {data!r}")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
    length = int(headers.get("content-length", "-1"))
    while length < 0 or len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return Reply(int(lines[0].split()[1]), headers, body, time.monotonic() - started)


def exchange(port: int, request: bytes, timeout: float = 20.0) -> Reply:
    """Send ``request`` as it is and read the answer (``timeout``: the test's own bound)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        started = time.monotonic()
        sock.sendall(request)
        return read_reply(sock, started)


def post_bytes(path: str, body: bytes, *, key: bytes = b"k1", extra: bytes = b"") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nx-functions-key: {KEY}\r\n".encode()
        + b"Idempotency-Key: "
        + key
        + b"\r\nContent-Type: application/json\r\n"
        + extra
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def order(order_id: str) -> dict[str, object]:
    return {
        "type": "PlaceOrder",
        "to": "orders",
        "body": {"order_id": order_id, "customer": "ada", "amount_cents": 1250},
    }


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[AzuriteEndpoints]:
    """Private: the sample app's queue names are fixed and these tests count their messages."""
    yield from started_azurite()


async def provisioned(endpoints: AzuriteEndpoints) -> None:
    async with AzureStorageAccount(StorageSettings(endpoints.connection_string)) as account:
        await provision(account, runtime.Worker.for_account(account).resources)


@pytest.fixture
async def account(own_azurite: AzuriteEndpoints) -> AsyncIterator[StorageAccount]:
    async with AzureStorageAccount(StorageSettings(own_azurite.connection_string)) as account:
        yield account


@pytest.fixture(scope="module")
def host(
    own_azurite: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    """The real function_app.py's HTTP functions in a real host process."""
    asyncio.run(provisioned(own_azurite))
    process = HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **os.environ,
            "AzureWebJobsStorage": own_azurite.connection_string,
            "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
            "BUS_HOST_FUNCTION_KEY": KEY,
        },
        tmp_path_factory.mktemp("hostile") / "host.log",
        args=["--functions", "ingress", "health", "--max-request-bytes", str(LIMIT)],
    )
    process.start()
    yield process
    assert process.stop() == 0
    log = process.log_path.read_text()
    assert "Traceback" not in log, log[-3000:]


async def orders_queued(account: StorageAccount) -> int:
    return await account.queue("orders").approximate_count()


@pytest.mark.parametrize(
    ("order_id", "complaint"),
    [
        ("a/b", "contains one of"),
        ("a\\b", "contains one of"),
        ("a#b", "contains one of"),
        ("a?b", "contains one of"),
        ("tab\there", "contains one of"),
        ("del\x7f", "contains one of"),
        ("x" * 513, "longer than 1 KiB"),
    ],
)
async def test_a_partition_key_table_storage_refuses_is_a_400_and_nothing_is_sent(
    host: HostProcess, account: StorageAccount, order_id: str, complaint: str
) -> None:
    before = await orders_queued(account)
    body = json.dumps(order(order_id)).encode()
    reply = await asyncio.to_thread(exchange, host.port, post_bytes("/api/messages", body))
    assert reply.status == 400
    error = str(reply.json()["error"])
    assert "PlaceOrder has an unusable partition key" in error
    assert "(from field 'order_id')" in error
    assert complaint in error
    assert await orders_queued(account) == before


async def test_a_valid_order_is_still_accepted(host: HostProcess, account: StorageAccount) -> None:
    before = await orders_queued(account)
    body = json.dumps(order("fine-order")).encode()
    reply = await asyncio.to_thread(
        exchange, host.port, post_bytes("/api/messages", body, key=b"fine")
    )
    assert reply.status == 202, reply
    assert await orders_queued(account) == before + 1


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        b'{"type": "PlaceOrder", "body": ' + b'{"a": ' * 20_000 + b"1" + b"}" * 20_001,
    ],
    ids=["arrays", "objects"],
)
def test_json_nested_past_the_parsers_stack_is_a_400(host: HostProcess, body: bytes) -> None:
    reply = exchange(host.port, post_bytes("/api/messages", body))
    assert (reply.status, reply.json()) == (
        400,
        {"error": "the body is nested too deeply to be a message"},
    )


def test_a_non_utf8_idempotency_key_is_a_400(host: HostProcess) -> None:
    body = json.dumps(order("o-key")).encode()
    reply = exchange(host.port, post_bytes("/api/messages", body, key=b"bad\xff\xfekey"))
    assert reply.status == 400
    assert "is not valid Unicode text" in str(reply.json()["error"])


def test_a_lone_surrogate_escape_in_the_body_is_a_400(host: HostProcess) -> None:
    body = json.dumps(order("o-sur")).encode().replace(b'"ada"', b'"\\udcff"')
    reply = exchange(host.port, post_bytes("/api/messages", body, key=b"sur"))
    assert reply.status == 400
    assert "not valid Unicode" in str(reply.json()["error"])


def test_a_declared_length_over_the_limit_is_refused_before_any_body_is_sent(
    host: HostProcess,
) -> None:
    # 100 MB announced, not one byte of it sent: the answer cannot depend on reading it.
    request = post_bytes("/api/messages", b"")
    request = request.replace(b"Content-Length: 0", f"Content-Length: {100 * LIMIT}".encode())
    reply = exchange(host.port, request, timeout=10)
    assert reply.status == 413
    assert f"this host accepts {LIMIT}" in str(reply.json()["error"])
    assert reply.seconds < 2


def test_a_streamed_body_is_refused_once_it_passes_the_limit(host: HostProcess) -> None:
    """Chunked, so no length is declared: the host must count what arrives and stop."""
    head = (
        f"POST /api/messages HTTP/1.1\r\nHost: x\r\nx-functions-key: {KEY}\r\n"
        "Idempotency-Key: stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"x" * 65536
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", host.port), timeout=20) as sock:
        started = time.monotonic()
        sock.sendall(head)
        # Up to 50 times the limit; a host that reads it all would answer only at the end.
        try:
            while sent < 50 * LIMIT:
                sock.sendall(framed)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the host answered and closed: read what it said
        reply = read_reply(sock, started)
    assert reply.status == 413
    assert f"passed {LIMIT} bytes" in str(reply.json()["error"])
    assert sent < 50 * LIMIT


def test_a_compressed_body_is_limited_by_what_it_inflates_to(host: HostProcess) -> None:
    """20 KB on the wire, 20 MB once inflated: the limit applies to what is read."""
    bomb = gzip.compress(b"\0" * (20 * LIMIT))
    assert len(bomb) < LIMIT // 10
    request = post_bytes("/api/messages", bomb, extra=b"Content-Encoding: gzip\r\n")
    reply = exchange(host.port, request)
    assert reply.status == 413
    assert f"passed {LIMIT} bytes" in str(reply.json()["error"])


def slow_body(port: int, drip: bool) -> tuple[Reply, bytes]:
    """Send the headers and 10 bytes of a 100-byte body, then nothing (or, with ``drip``, one
    byte a second); the host's reply, and what the connection gives after it."""
    request = post_bytes("/api/messages", b"{" + b" " * 99)  # Content-Length: 100
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        started = time.monotonic()
        sock.sendall(request[:-90])  # the headers and 10 bytes of the body
        reply: Reply | None = None
        if drip:
            # One byte a second keeps every single read short: the bound is on the whole body.
            sock.settimeout(1)
            for byte in request[-90:]:
                try:
                    reply = read_reply(sock, started)
                    break
                except TimeoutError:
                    sock.sendall(bytes([byte]))
            sock.settimeout(20)
        if reply is None:
            reply = read_reply(sock, started)
        return reply, sock.recv(1)


def incomplete_request(port: int, sent: bytes) -> tuple[bytes, float]:
    """Connect and send ``sent``, nothing more; what the host then sends (nothing if it
    closes without an answer) and after how many seconds from connecting."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        started = time.monotonic()
        sock.sendall(sent)
        answer = sock.recv(1)
        return answer, time.monotonic() - started


@dataclass(frozen=True)
class SlowClients:
    bodies: dict[str, Future[tuple[Reply, bytes]]]
    requests: dict[str, Future[tuple[bytes, float]]]


@pytest.fixture(scope="module")
def slow_clients(host: HostProcess) -> Iterator[SlowClients]:
    """The slow clients of the tests below, all at once: each waits out one of the host's
    time bounds, which the host keeps for each connection on its own."""
    half_the_headers = b"POST /api/messages HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k"
    with ThreadPoolExecutor(4) as pool:
        yield SlowClients(
            bodies={
                "stalls": pool.submit(slow_body, host.port, False),
                "drips": pool.submit(slow_body, host.port, True),
            },
            requests={
                "nothing": pool.submit(incomplete_request, host.port, b""),
                "half-the-headers": pool.submit(incomplete_request, host.port, half_the_headers),
            },
        )


@pytest.mark.parametrize("client", ["stalls", "drips"])
def test_a_body_that_does_not_arrive_in_time_is_a_408(
    slow_clients: SlowClients, client: str
) -> None:
    reply, after = slow_clients.bodies[client].result()
    assert after == b"", "the connection is closed after the 408"
    assert reply.status == 408
    assert "did not arrive within" in str(reply.json()["error"])
    assert BODY_SECONDS <= reply.seconds < BODY_SECONDS + 3


@pytest.mark.parametrize("client", ["nothing", "half-the-headers"])
def test_a_connection_that_sends_no_whole_request_is_closed(
    slow_clients: SlowClients, client: str
) -> None:
    answer, seconds = slow_clients.requests[client].result()
    assert answer == b"", "closed without an answer: there is no request to answer"
    # The host's clock starts at accept, a moment before ours: allow that moment.
    assert HEADERS_SECONDS - 0.5 <= seconds < HEADERS_SECONDS + 3


@pytest.mark.parametrize("path", ["/API/MESSAGES", "/Api/Messages", "/api/MESSAGES/"])
def test_routes_are_case_insensitive_as_on_azure(host: HostProcess, path: str) -> None:
    body = json.dumps(order(f"case-{path.count('A')}")).encode()
    key = f"case{len(path)}{path.count('A')}".encode()
    reply = exchange(host.port, post_bytes(path, body, key=key))
    assert reply.status == 202, reply


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /api/health HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n", 400),
        (b"GET /api/health HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", 400),
        (b"POST /api/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: bogus\r\n\r\n", 400),
        (b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n", 401),
        (b"GET /api/health HTTP/1.1\r\nHost: x\r\nx-functions-key: \xff\xfe\r\n\r\n", 401),
        (
            post_bytes("/api/messages", b"abcd", extra=b"Content-Encoding: gzip\r\n"),
            400,
        ),
        (b"GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (b"GET /api/nothing HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (f"GET /api/messages HTTP/1.1\r\nHost: x\r\nx-functions-key: {KEY}\r\n\r\n".encode(), 405),
    ],
    ids=[
        "request-line",
        "header-line",
        "content-length",
        "transfer-encoding",
        "401",
        "401-non-utf8-key",
        "400-bad-gzip",
        "404",
        "404-api",
        "405",
    ],
)
def test_every_error_the_host_answers_is_json(
    host: HostProcess, request_bytes: bytes, status: int
) -> None:
    reply = exchange(host.port, request_bytes)
    assert reply.status == status
    error = reply.json()["error"]
    assert isinstance(error, str)
    assert error


@pytest.mark.parametrize(
    ("key", "extra"),
    [(b"dup-a", b"Idempotency-Key: dup-b\r\n"), (b"dup-a", b"idempotency-key: dup-a\r\n")],
    ids=["two-keys", "one-key-twice"],
)
async def test_a_repeated_idempotency_key_header_is_a_400_and_nothing_is_sent(
    host: HostProcess, account: StorageAccount, key: bytes, extra: bytes
) -> None:
    before = await orders_queued(account)
    body = json.dumps(order("o-dup")).encode()
    request = post_bytes("/api/messages", body, key=key, extra=extra)
    reply = await asyncio.to_thread(exchange, host.port, request)
    assert reply.status == 400
    assert "one Idempotency-Key header" in str(reply.json()["error"])
    assert await orders_queued(account) == before


def test_the_host_still_serves_after_the_attacks(host: HostProcess) -> None:
    request = f"GET /api/health?code={KEY} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    reply = exchange(host.port, request)
    assert reply.status == 200, reply
