"""The local host's connections against clients that try to keep them: an idle kept-alive
connection, half a second request after a first answer, key and path guessing on one
connection, more connections than the host takes; and its access log against a key in the
query string and a path written to forge a log line. Real sockets on loopback against a real
host process; every wait is bounded by the host's own timers plus a margin."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from tests.conftest import started_azurite
from tests.host.test_hostile_http import HEADERS_SECONDS, provisioned, read_reply

pytestmark = pytest.mark.azurite

KEY = "connections-fn-key-SECRET"
CAP = 12
"""``--max-connections`` of the capped host."""
MARGIN = 3.0
"""Seconds allowed past a host timer before a test calls it missed."""


@pytest.fixture(scope="module")
def own_azurite() -> Iterator[AzuriteEndpoints]:
    for endpoints in started_azurite():
        asyncio.run(provisioned(endpoints))  # so that health answers 200
        yield endpoints


def started_host(
    azurite: AzuriteEndpoints, folder: pytest.TempPathFactory, name: str, *args: str
) -> HostProcess:
    process = HostProcess(
        REPO_ROOT / "function_app.py",
        {
            **os.environ,
            "AzureWebJobsStorage": azurite.connection_string,
            "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
            "BUS_HOST_FUNCTION_KEY": KEY,
        },
        folder.mktemp(name) / "host.log",
        args=["--functions", "health", *args],
    )
    process.start()
    return process


@pytest.fixture(scope="module")
def host(
    own_azurite: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    process = started_host(own_azurite, tmp_path_factory, "connections")
    yield process
    assert process.stop() == 0


@pytest.fixture(scope="module")
def capped(
    own_azurite: AzuriteEndpoints, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    process = started_host(own_azurite, tmp_path_factory, "capped", "--max-connections", str(CAP))
    yield process
    assert process.stop() == 0


def health(key: str = KEY) -> bytes:
    return f"GET /api/health HTTP/1.1\r\nHost: x\r\nx-functions-key: {key}\r\n\r\n".encode()


def closed_after(sock: socket.socket, started: float) -> float:
    """Seconds from ``started`` until the host closes ``sock`` (reading and dropping
    anything it still sends); the socket's own timeout bounds the wait."""
    while sock.recv(65536):
        pass
    return time.monotonic() - started


def test_an_idle_kept_alive_connection_is_closed_within_seconds(host: HostProcess) -> None:
    with socket.create_connection(("127.0.0.1", host.port), timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(health())
        reply = read_reply(sock, started)
        assert reply.status == 200, reply
        assert reply.headers.get("connection", "").lower() != "close"
        answered = time.monotonic()
        assert closed_after(sock, answered) < HEADERS_SECONDS + MARGIN


def test_the_header_timer_runs_again_for_every_request(host: HostProcess) -> None:
    """A first request answered, then half of a second one: closed as the first would be."""
    with socket.create_connection(("127.0.0.1", host.port), timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(health())
        assert read_reply(sock, started).status == 200
        for _ in range(2):  # a second whole request on the same connection is served
            started = time.monotonic()
            sock.sendall(health())
            assert read_reply(sock, started).status == 200
        answered = time.monotonic()
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\nx-functions-")
        seconds = closed_after(sock, answered)
        assert HEADERS_SECONDS - 0.5 <= seconds < HEADERS_SECONDS + MARGIN


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (health("a-guessed-key"), 401),
        (b"GET /api/nothing-here HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (f"DELETE /api/health HTTP/1.1\r\nHost: x\r\nx-functions-key: {KEY}\r\n\r\n".encode(), 405),
    ],
    ids=["401", "404", "405"],
)
def test_a_guess_that_fails_closes_the_connection(
    host: HostProcess, request_bytes: bytes, status: int
) -> None:
    with socket.create_connection(("127.0.0.1", host.port), timeout=30) as sock:
        started = time.monotonic()
        # A second guess pipelined behind the first is never answered.
        sock.sendall(request_bytes + health("another-guess"))
        reply = read_reply(sock, started)
        assert reply.status == status
        assert reply.headers.get("connection", "").lower() == "close"
        assert b"HTTP/1.1" not in reply.body
        assert closed_after(sock, started) < MARGIN


def guess_then_stall(port: int) -> float:
    """One connection of the reported attack: a wrong key (401), then half a request; the
    seconds until the host closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(health("wrong"))
        assert read_reply(sock, started).status == 401
        with contextlib.suppress(OSError):  # already closed: that is the point
            sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n")
        try:
            return closed_after(sock, started)
        except ConnectionResetError:
            return time.monotonic() - started


def test_two_hundred_stalled_guessers_are_all_closed(host: HostProcess) -> None:
    with ThreadPoolExecutor(50) as pool:
        seconds = list(pool.map(guess_then_stall, [host.port] * 200))
    assert len(seconds) == 200
    assert max(seconds) < HEADERS_SECONDS + MARGIN, sorted(seconds)[-5:]
    # and the host still answers
    with socket.create_connection(("127.0.0.1", host.port), timeout=30) as sock:
        sock.sendall(health())
        assert read_reply(sock, time.monotonic()).status == 200


def test_connections_over_the_cap_are_refused_and_the_host_recovers(
    capped: HostProcess,
) -> None:
    held: list[socket.socket] = []
    try:
        for _ in range(CAP):
            held.append(socket.create_connection(("127.0.0.1", capped.port), timeout=30))
        time.sleep(0.5)  # the host has accepted them all
        with socket.create_connection(("127.0.0.1", capped.port), timeout=30) as extra:
            started = time.monotonic()
            extra.sendall(health())
            reply = read_reply(extra, started)
            assert reply.status == 503
            assert "too many connections" in str(reply.json()["error"])
        # The held ones send nothing: the header timer frees them, then the host serves.
        started = time.monotonic()
        for sock in held:
            assert closed_after(sock, started) < HEADERS_SECONDS + MARGIN
    finally:
        for sock in held:
            sock.close()
    with socket.create_connection(("127.0.0.1", capped.port), timeout=30) as sock:
        sock.sendall(health())
        assert read_reply(sock, time.monotonic()).status == 200
    log = capped.log_path.read_text(errors="replace")
    assert f"refusing connections over the cap of {CAP}" in log


def test_the_access_log_holds_no_key_and_no_forged_line(host: HostProcess) -> None:
    with urllib.request.urlopen(f"{host.url}/api/health?code={KEY}", timeout=30) as answer:
        assert answer.status == 200
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{host.url}/api/health?code=guess-{KEY}", timeout=30)
    assert refused.value.code == 401
    forged = "/api/x%0a2026-01-01 00:00:00,000 INFO shared.bus.pipeline: outcome=processed"
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{host.url}{forged.replace(' ', '%20')}", timeout=30)
    assert missing.value.code == 404
    # Requests aiohttp itself refuses: its error text quotes what it could not parse.
    for malformed in (
        f"GET /api/health?code={KEY} HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
        f"GET /api/health?code={KEY} HTTP/9.9\r\nHost: x\r\n\r\n",
        f"GET /api/health?x=1&code={KEY}\x01\nforged: outcome=processed HTTP/1.1\r\n\r\n",
        f"G\x1bT /api/health?code={KEY} HTTP/1.1\r\nHost: x\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", host.port), timeout=30) as sock:
            sock.sendall(malformed.encode())
            assert read_reply(sock, time.monotonic()).status == 400
    time.sleep(0.5)  # the access log line follows the answer
    log = host.log_path.read_text(errors="replace")
    assert KEY not in log
    assert "code=" not in log
    access = [line for line in log.splitlines() if "aiohttp.access" in line]
    assert any("GET /api/health 200" in line for line in access), access
    assert any("GET /api/health 401" in line for line in access), access
    for line in log.splitlines():
        assert "outcome=processed" not in line or "aiohttp.access" in line, line
