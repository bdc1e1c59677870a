"""The HTTP provider: a declared service called over HTTP (``docs/effects.md``, section 3).

Each call is ``POST <base address><operation's path>`` with the body as JSON, the idempotency
key in the service's declared header and, when the service has a credential, ``Authorization:
Bearer <credential>``. The performer bounds the call's time; this module bounds everything
else a provider (or whatever answers at its address) could make the worker do:

- no redirect is followed: a message must never steer the bus, with its credential, to
  another address; a 3xx is an unusable answer, retried with the same key;
- an answer is read up to ``max_bytes`` and no further; a larger one is unusable;
- an answer body must be one JSON object in UTF-8, without NaN or Infinity and at most
  ``MAX_DEPTH`` levels deep; anything else is unusable;
- a compressed answer is refused (the request asks for none), so the limit is on what is
  held in memory, not on what a small body inflates to.

An unusable answer raises ``AnswerUnusable`` (the call reached the provider); a connection
that could not be opened raises ``ProviderNotReached`` (nothing was sent); any other transport
failure (a dropped connection, a reset) raises ``ProviderUnavailable``. No error text holds
the credential or a header: only the service, the operation, the status and escaped, bounded
provider text (``shared.logsafe.shown``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import aiohttp

from shared.bus.effects import ServiceDeclaration
from shared.effects.addresses import ServiceAddress
from shared.effects.provider import TOO_MANY_REQUESTS, ProviderAnswer
from shared.errors import AnswerUnusable, ProviderNotReached, ProviderUnavailable
from shared.logsafe import shown

MAX_DEPTH = 32
"""Nesting levels of an answer body: enough for any provider's object, and far below what
would exhaust the stack of whoever reads the answer message next."""
READ_CHUNK = 64 * 1024
PROVIDER_TEXT = 200
"""Characters of provider-chosen text (a reason phrase, an error) kept in an error."""


class HttpClient:
    """The one aiohttp session of a worker's calls to its services: opened on first use,
    closed with the worker (``shared.runtime.Worker.close``), reopened on next use. A session
    belongs to the event loop it was opened in, so a call in another loop (a tool that runs
    one loop per command) opens a new one."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # auto_decompress off: a small gzip body must not become a large one in memory.
            self._session = aiohttp.ClientSession(
                auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None)
            )
            self._loop = loop
        return self._session

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed and self._loop is asyncio.get_running_loop():
            await session.close()


class HttpProvider:
    """``service`` at ``address``, through ``client``; answers read up to ``max_bytes``."""

    def __init__(
        self,
        service: ServiceDeclaration,
        address: ServiceAddress,
        client: HttpClient,
        *,
        max_bytes: int,
    ) -> None:
        self.service = service
        self.address = address
        self.client = client
        self.max_bytes = max_bytes

    def __repr__(self) -> str:
        return f"HttpProvider({self.service.name} at {self.address.url})"

    async def call(self, operation: str, body: Mapping[str, Any], key: str) -> ProviderAnswer:
        url = self.address.url + self.service.path(operation)
        what = f"service {self.service.name} {operation}"
        try:
            async with self.client.session().post(
                url,
                data=json.dumps(body, separators=(",", ":"), allow_nan=False).encode(),
                headers=self._headers(key),
                allow_redirects=False,
            ) as response:
                return await self._answer(what, response)
        except aiohttp.ClientConnectorError as e:
            raise ProviderNotReached(f"{what}: could not connect: {_text(e)}") from None
        except (aiohttp.ClientError, OSError) as e:
            raise ProviderUnavailable(
                f"{what}: the connection failed after the request was sent: {_text(e)}"
            ) from None

    def _headers(self, key: str) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            self.service.idempotency_header: key,
        }
        if self.address.credential is not None:
            headers["Authorization"] = self.address.credential.authorization()
        return headers

    async def _answer(self, what: str, response: aiohttp.ClientResponse) -> ProviderAnswer:
        status = response.status
        if 300 <= status < 400:
            raise AnswerUnusable(f"{what}: answered {status}, a redirect, which is not followed")
        if not _body_matters(status, self.service):
            return ProviderAnswer(status, {})  # retried or refused whatever the body says
        if response.headers.get("Content-Encoding", "identity").lower() != "identity":
            raise AnswerUnusable(f"{what}: answered {status} with a compressed body")
        declared = response.content_length
        if declared is not None and declared > self.max_bytes:
            raise AnswerUnusable(f"{what}: {_too_large(status, self.max_bytes)}")
        raw = await _read_at_most(response.content, self.max_bytes)
        if raw is None:
            raise AnswerUnusable(f"{what}: {_too_large(status, self.max_bytes)}")
        return ProviderAnswer(status, answer_body(raw, f"{what}: answered {status}"))


def _body_matters(status: int, service: ServiceDeclaration) -> bool:
    """Only a success or a refusal for good carries a body the answer message keeps; the
    statuses the service declares "in progress" or "key reused" are neither."""
    definite = 200 <= status < 300 or 400 <= status < 500
    declared = status in service.in_progress_statuses or status in service.key_reused_statuses
    return definite and not declared and status != TOO_MANY_REQUESTS


def _too_large(status: int, limit: int) -> str:
    return f"answered {status} with a body larger than {limit} bytes (BUS_EFFECT_ANSWER_MAX_BYTES)"


async def _read_at_most(content: aiohttp.StreamReader, limit: int) -> bytes | None:
    """The body, or None as soon as it is longer than ``limit`` (nothing more is read)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await content.read(min(READ_CHUNK, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)


def answer_body(raw: bytes, what: str) -> dict[str, Any]:
    """``raw`` as one JSON object, or AnswerUnusable saying why not."""
    try:
        parsed = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise AnswerUnusable(f"{what} with a body that is not UTF-8") from None
    except RecursionError:
        raise AnswerUnusable(f"{what} with a body nested too deeply") from None
    except ValueError as e:
        raise AnswerUnusable(f"{what} with a body that is not JSON: {_text(e)}") from None
    if not isinstance(parsed, dict):
        raise AnswerUnusable(f"{what} with a JSON {type(parsed).__name__}, not an object")
    if _depth(parsed) > MAX_DEPTH:
        raise AnswerUnusable(f"{what} with a body nested more than {MAX_DEPTH} levels")
    return parsed


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    """How many objects and arrays deep ``value`` goes, without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        deepest = max(deepest, level)
        stack.extend((c, level + 1) for c in children if isinstance(c, dict | list))
    return deepest


def _text(error: BaseException) -> str:
    return f"{type(error).__name__}: {shown(error, PROVIDER_TEXT)}"
