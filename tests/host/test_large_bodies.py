"""Bodies of 16 MiB (``BUS_MAX_PAYLOAD_BYTES``' default) through the local host on Azurite:
over HTTP and ``bus send`` (from stdin), delayed, sent by a handler, parked, shown, replayed,
cleaned up and audited; a body over the limit is refused naming it, and nothing is sent.

One host runs the large-body app (``lab.bench.large_app``) for the module; each test uses
documents of its own. A 16 MiB message takes Azurite a second or two."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.bench.large_app import StoreDocument
from lab.bench.payload_large import document, host_environ, post, provisioned, stored, until_stored
from lab.host.process import HostProcess
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared.app_settings import MAX_PAYLOAD
from shared.bus.state.base import EndpointState
from shared.bus.state.rows import TableRows
from shared.resources import poison_queue
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite

LIMIT = MAX_PAYLOAD.default
FRAME = len(StoreDocument(doc_id="doc-xx", content="").model_dump_json())
"""The serialised body of a StoreDocument besides its content (every doc id has 6 characters)."""
FULL = LIMIT - FRAME
"""Content characters of a StoreDocument whose body is exactly the limit."""
WAIT = 60.0


@dataclass
class Hosted:
    """The module's host of the large-body app, with what its tests need to reach it."""

    host: HostProcess
    environ: dict[str, str]
    folder: Path
    tokens: str


@dataclass
class Running:
    """The module's host, and an account open for one test."""

    hosted: Hosted
    account: AzureStorageAccount

    @property
    def host(self) -> HostProcess:
        return self.hosted.host

    def bus(self, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """``bus ARGS`` as a separate process, as an operator runs it."""
        return self._run("shared.cli", "--no-progress", *args, stdin=stdin)

    def audit(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        """``python -m shared.audit ARGS`` as a separate process."""
        return self._run("shared.audit", *args)

    def _run(
        self, module: str, *args: str, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            input=stdin,
            capture_output=True,
            cwd=self.hosted.folder,
            env={**self.hosted.environ, "PYTHONPATH": str(REPO_ROOT)},
            timeout=300,
        )

    async def token_count(self) -> int:
        return len([b async for b in self.account.blob_container(self.hosted.tokens).list()])

    async def tokens_left(self) -> int:
        """Tokens but those processed messages leave, claimed by their committed O(m), for
        the cleanup's R7 (``shared.bus.receiver``)."""
        processed: dict[str, str] = {}
        for endpoint in ("documents", "archive"):
            rows = EndpointState(TableRows(self.account.table(endpoint)))
            async for record in rows.outbox_records():
                if record.committed:
                    processed[record.incoming_token] = record.claim
        container = self.account.blob_container(self.hosted.tokens)
        return len(
            [
                b
                async for b in container.list()
                if processed.get(b.name) is None or b.metadata.get("claim") != processed[b.name]
            ]
        )

    async def depth(self, queue: str) -> int:
        return await self.account.queue(queue).approximate_count()

    async def quiet(self) -> None:
        """Until both endpoints' queues are empty (leased messages count)."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if await self.depth("documents") + await self.depth("archive") == 0:
                return
            await asyncio.sleep(0.1)
        raise TimeoutError("the queues did not empty")


@pytest.fixture(scope="module")
def hosted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosted]:
    """The large-body app's names are fixed: an emulator of its own, and one host."""
    for emulator in started_azurite():
        folder = tmp_path_factory.mktemp("large")
        environ = host_environ(emulator)
        tokens = asyncio.run(provision_app(emulator, environ))
        host = HostProcess(REPO_ROOT / "function_app.py", environ, folder / "host.log")
        host.start()
        try:
            yield Hosted(host, environ, folder, tokens)
        finally:
            host.stop()


async def provision_app(emulator: AzuriteEndpoints, environ: dict[str, str]) -> str:
    """The app's resources created; the name of its tokens container."""
    async with AzureStorageAccount(StorageSettings(emulator.connection_string)) as account:
        worker = await provisioned(account, environ)
        return worker.bus().config.tokens_container


@pytest.fixture
async def running(hosted: Hosted) -> AsyncIterator[Running]:
    settings = StorageSettings(hosted.environ["AzureWebJobsStorage"])
    async with AzureStorageAccount(settings) as account:
        yield Running(hosted, account)


async def test_a_16_mib_command_over_http_is_processed_exactly_once(running: Running) -> None:
    request = document("doc-01", FULL)

    status, answer = await post(running.host.url, request, "http-16")
    assert status == 202, answer[:500]
    assert await until_stored(running.account, "documents", "doc-01", WAIT) == {
        "documents": 1,
        "chars": FULL,
    }

    # A retry with the same key is answered from the record: its signal is sent again and
    # finds the token claimed by the committed O(m) (or gone, after a cleanup pass), so the
    # handler does not run twice.
    status, again = await post(running.host.url, request, "http-16")
    assert status == 200
    assert json.loads(again)["message_ids"] == json.loads(answer)["message_ids"]
    await running.quiet()
    assert await stored(running.account, "documents", "doc-01") == {"documents": 1, "chars": FULL}
    assert await running.tokens_left() == 0


async def test_a_post_one_kib_over_the_limit_is_a_413_naming_it_and_sends_nothing(
    running: Running,
) -> None:
    tokens = await running.token_count()

    status, answer = await post(running.host.url, document("doc-02", FULL + 1024), "http-big")

    assert status == 413
    error = json.loads(answer)["error"]
    assert f"StoreDocument body is {LIMIT + 1024:,} bytes" in error
    assert f"the limit is {LIMIT:,} bytes (BUS_MAX_PAYLOAD_BYTES)" in error
    assert await running.token_count() == tokens
    assert await running.depth("documents") == 0


async def test_bus_send_takes_16_mib_from_stdin_and_refuses_more_with_exit_2(
    running: Running,
) -> None:
    tokens = await running.token_count()
    over = json.dumps({"doc_id": "doc-03", "content": "x" * (FULL + 1)}).encode()

    refused = await asyncio.to_thread(
        running.bus, "send", "StoreDocument", "--key", "cli-big", "--body", "@-", stdin=over
    )

    assert (refused.returncode, refused.stdout) == (2, b"")
    assert f"the limit is {LIMIT:,} bytes (BUS_MAX_PAYLOAD_BYTES)" in refused.stderr.decode()
    assert await running.token_count() == tokens
    assert await running.depth("documents") == 0

    full = json.dumps({"doc_id": "doc-03", "content": "x" * FULL}).encode()
    sent = await asyncio.to_thread(
        running.bus, "send", "StoreDocument", "--key", "cli-16", "--body", "@-", stdin=full
    )
    assert sent.returncode == 0, sent.stderr.decode()[-2000:]
    assert await until_stored(running.account, "documents", "doc-03", WAIT) == {
        "documents": 1,
        "chars": FULL,
    }


async def test_a_delayed_16_mib_command_is_delivered_once_after_its_delay(
    running: Running,
) -> None:
    request = {**document("doc-04", FULL), "delay_seconds": 3}

    status, answer = await post(running.host.url, request, "http-delayed")
    assert status == 202, answer[:500]
    sent_at = time.monotonic()

    state = await until_stored(running.account, "documents", "doc-04", WAIT)
    assert time.monotonic() - sent_at >= 2.5  # not before its due time (less the POST's own)
    assert state == {"documents": 1, "chars": FULL}
    await running.quiet()
    assert await stored(running.account, "documents", "doc-04") == state


async def test_a_handler_sending_over_the_limit_parks_then_replays_once_under_a_higher_one(
    running: Running,
) -> None:
    # Given a 9 MiB document whose handler sends an archive copy holding it twice (18 MiB)
    half = 9 * 1024 * 1024
    status, answer = await post(running.host.url, document("doc-05", half, copies=2), "park")
    assert status == 202, answer[:500]
    [message_id] = json.loads(answer)["message_ids"]

    # Then it is parked on its first try, saying why, and nothing was sent
    parked = await parked_reasons(running, "documents")
    assert parked[0]["error_type"] == "MessageTooLarge"
    assert f"the limit is {LIMIT:,} bytes (BUS_MAX_PAYLOAD_BYTES)" in str(parked[0]["reason"])
    assert parked[0]["dequeue_count"] == 1
    assert await stored(running.account, "documents", "doc-05") is None
    assert await running.depth("archive") == 0
    assert await running.tokens_left() == 1  # the parked message's own token, kept for replay

    # `bus poison list` names it in a line; `bus poison show` prints a screenful of its 9 MiB
    # body, not all of it
    listed = await asyncio.to_thread(running.bus, "poison", "list", "documents")
    assert listed.returncode == 0, listed.stderr.decode()[-2000:]
    assert message_id in listed.stdout.decode()
    assert len(listed.stdout) < 5_000
    shown = await asyncio.to_thread(running.bus, "poison", "show", message_id)
    assert shown.returncode == 0, shown.stderr.decode()[-2000:]
    assert len(shown.stdout) < 20_000
    assert "StoreDocument" in shown.stdout.decode()
    assert "more characters: --body-file PATH writes it" in shown.stdout.decode()

    # When the limit is raised and the message replayed, it is processed once
    await restart(running, BUS_MAX_PAYLOAD_BYTES=str(2 * LIMIT))
    try:
        replayed = await asyncio.to_thread(running.bus, "replay", "documents", "--id", message_id)
        assert replayed.returncode == 0, replayed.stderr.decode()[-2000:]
        archived = await until_stored(running.account, "archive", "doc-05", WAIT)
        assert archived == {"documents": 1, "chars": 2 * half}
        await running.quiet()
        assert await stored(running.account, "documents", "doc-05") == {
            "documents": 1,
            "chars": half,
        }
        assert await running.depth(poison_queue("documents")) == 0
    finally:
        await restart(running)

    # And a cleanup pass leaves no token behind
    cleaned = await asyncio.to_thread(running.bus, "cleanup", "--grace-seconds", "0")
    assert cleaned.returncode == 0, cleaned.stderr.decode()[-2000:]
    assert await running.token_count() == 0
    # The audit's export reads both endpoints' audit rows, which name messages, not bodies
    export = running.hosted.folder / "export"
    exported = await asyncio.to_thread(
        running.audit, "export", "--out", str(export), "--format", "json", "--quiet"
    )
    assert exported.returncode == 0, exported.stderr.decode()[-2000:]
    rows = {
        endpoint: (export / "audit" / f"{endpoint}-000000.json").read_text()
        for endpoint in ("documents", "archive")
    }
    assert message_id in rows["documents"]
    assert len(rows["documents"]) + len(rows["archive"]) < 100_000

    # Nothing the host logged, the failure that parked the message included, holds a body
    log = (running.hosted.folder / "host.log").read_text()
    assert "MessageTooLarge" in log
    assert max(len(line) for line in log.splitlines()) < 5_000


async def parked_reasons(running: Running, endpoint: str) -> list[dict[str, object]]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = await running.account.queue(poison_queue(endpoint)).peek()
        if found:
            return [json.loads(m.content)["poison"] for m in found]
        await asyncio.sleep(0.1)
    raise TimeoutError(f"nothing was parked on {endpoint}")


async def restart(running: Running, **settings: str) -> None:
    """Stop the host and start it again with ``settings`` over the module's environment."""
    await asyncio.to_thread(running.host.stop)
    running.host.environ = {**running.hosted.environ, **settings}
    await asyncio.to_thread(running.host.start)
