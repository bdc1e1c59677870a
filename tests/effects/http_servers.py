"""Real HTTP servers on 127.0.0.1 for the effect tests: a provider that keeps idempotency
keys (aiohttp.web), and raw socket servers that misbehave as a hostile or broken provider
would (endless, trickling, dropped or redirecting answers)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

KEY_HEADER = "Idempotency-Key"


@dataclass(frozen=True)
class Received:
    """A request as the provider got it, its header names lower-cased."""

    path: str
    headers: dict[str, str]
    body: bytes


IN_PROGRESS = 409


@dataclass
class KeyedProvider:
    """A provider with Stripe's key semantics: the first call of a key applies it and its
    answer is kept; a later call with the key gets that answer, or, while the first is still
    running, 409 "in progress" (nothing applied). ``answer_after``: the first call of each key
    is applied at once but answered only after that many seconds (an answer the client may
    have given up on); ``busy_until_refused``: the first call of each key keeps running, its
    answer held and its key in progress, until that many calls under the key were answered
    409 (a slow provider, counted rather than timed); ``key_header``: where the key is read."""

    answer_after: float = 0.0
    busy_until_refused: int = 0
    key_header: str = KEY_HEADER
    received: list[Received] = field(default_factory=list)
    ledger: list[str] = field(default_factory=list)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    running: dict[str, asyncio.Event] = field(default_factory=dict)
    in_progress_answered: int = 0
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.received.append(Received(request.path, headers, body))
        key = request.headers.get(self.key_header, "")
        if key in self.running:
            return self._in_progress(key)
        if key in self.answers:
            return web.json_response(self.answers[key])
        self.ledger.append(key)
        answer = {"id": f"ch_{len(self.ledger)}", "body": json.loads(body)}
        self.answers[key] = answer
        if self.busy_until_refused:
            done = self.running[key] = asyncio.Event()
            await done.wait()
        if self.answer_after:
            await asyncio.sleep(self.answer_after)
        return web.json_response(answer)

    def _in_progress(self, key: str) -> web.Response:
        self.in_progress_answered += 1
        if self.in_progress_answered >= self.busy_until_refused:
            self.running.pop(key).set()  # the first call ends: the next one gets its answer
        error = {"error": {"type": "idempotency_error", "message": "a request is in progress"}}
        return web.json_response(error, status=IN_PROGRESS)


@asynccontextmanager
async def serving(provider: KeyedProvider) -> AsyncIterator[KeyedProvider]:
    app = web.Application()
    app.router.add_post("/{tail:.*}", provider.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    provider.url = f"http://{host}:{port}"
    try:
        yield provider
    finally:
        await runner.cleanup()


Conversation = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawServer:
    """A socket server that runs ``conversation`` on every connection; ``connections``
    counts them and ``sent`` the bytes it managed to write."""

    conversation: Conversation
    connections: int = 0
    sent: int = 0
    url: str = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with suppress(ConnectionError, asyncio.IncompleteReadError):
            await self.conversation(reader, writer)
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()

    async def write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await writer.drain()
        self.sent += len(data)


@asynccontextmanager
async def raw_server(conversation: Conversation) -> AsyncIterator[RawServer]:
    server = RawServer(conversation)
    listening = await asyncio.start_server(server._serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    server.url = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        listening.close()
        with suppress(TimeoutError):
            await asyncio.wait_for(listening.wait_closed(), 1)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and body (by its Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


def head(status: str, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers, "", ""]
    return "\r\n".join(lines).encode()
