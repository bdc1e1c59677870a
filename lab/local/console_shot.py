"""``python -m lab.local.console_shot``: the console's screenshots in docs/console.md, taken on
the demo's run.

It runs the demo's main job (``lab.local.demo``: the sample app on an embedded Azurite and
PostgreSQL, the local host duplicating, crashing and killed on purpose) and keeps the
emulator running afterwards. The demo's run parks nothing, so the script then parks a few
messages of the demo's app as the pipeline parks a message whose handler failed on its last
try: real commands sent through the ingress (their tokens and bodies are real), taken from
their queue and parked with ``shared.bus.poison.park`` and the reason of an error the
script names (a payment provider that timed out, a carrier that refused the connection).
Then it starts ``bus console`` on that storage as an operator does and photographs its
overview and its failed messages with Debian's Chromium (Playwright) into docs/img/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Page, ViewportSize, sync_playwright

from lab.chromium import CHROMIUM_FLAGS, chromium
from lab.local.azurite import REPO_ROOT, Azurite
from lab.local.console_process import started_console
from lab.local.demo import DEMO_APP, Options, demo_app, drive, inherited_environ
from lab.local.payments import Provider, provider_args
from lab.local.postgres import PostgresServer
from lab.provider.process import provider_process
from shared.app_loader import APP_SETTING
from shared.bus import Command
from shared.bus.envelope import bus_message_id
from shared.bus.poison import DEFAULT_PARKED_CONTAINER, error_reason, park
from shared.bus.state.connection import URL_SETTING
from shared.runtime import Worker
from shared.sample.charges import PAYMENTS_STORE
from shared.settings import DEFAULT_SETTING, StorageSettings, resolve_settings
from shared.stores.azure import AzureStorageAccount

OUT = REPO_ROOT / "docs" / "img"
OPERATOR = "ops-ada"
VIEWPORT: ViewportSize = {"width": 1400, "height": 860}
SHORT: ViewportSize = {"width": 1400, "height": 420}


@dataclass(frozen=True)
class Failure:
    """Commands parked at ``endpoint`` as if their handler had raised ``error``."""

    endpoint: str
    error: BaseException
    commands: list[Command]


def failures() -> list[Failure]:
    # Imported here: the sample app reads SAMPLE_PAYMENTS_STORE when it is imported, which
    # main sets first (as the demo does), so that payments keeps its state where the host's does.
    from shared.sample.app import ChargePayment, FireAt, ShipOrder

    return [
        Failure(
            "payments",
            TimeoutError("the payment provider did not answer within 10 s"),
            [ChargePayment(order_id=f"late-{i}", amount_cents=1200 + i) for i in range(7)],
        ),
        Failure(
            "shipping",
            ConnectionRefusedError("carrier.example:443 refused the connection"),
            [ShipOrder(order_id=f"ship-{i}") for i in range(3)],
        ),
        Failure(
            "shootingrange",
            ValueError("position 11 is off the range"),
            [FireAt(game_id="g-late", position=i) for i in range(2)],
        ),
    ]


async def park_failures(connection_string: str, settings: dict[str, str]) -> int:
    """Each failure's commands sent through the ingress, taken from their queue and parked
    with the error's reason; how many were parked."""
    parked = 0
    async with AzureStorageAccount(StorageSettings(connection_string)) as account:
        worker = Worker(demo_app(), resolve_settings(settings, local_file=None), account)
        client = worker.bus().client("operatorbench")
        try:
            for failure in failures():
                for command in failure.commands:
                    key = f"{failure.endpoint}-{secrets.token_hex(4)}"
                    await client.send(command, to=failure.endpoint, idempotency_key=key)
                parked += await _park_waiting(worker, failure)
        finally:
            await worker.close()
    return parked


async def _park_waiting(worker: Worker, failure: Failure) -> int:
    account, parked = worker.account(), 0
    queue = account.queue(failure.endpoint)
    tokens = account.blob_container(worker.config.tokens_container)
    while batch := await queue.receive(32, visibility_timeout=60):
        for message in batch:
            why = error_reason(
                failure.endpoint,
                failure.error,
                5,
                message_id=bus_message_id(message.content),
                message_type=type(failure.commands[0]).type_name(),
                enqueued_at=message.inserted_on,
                failed_at=message.inserted_on,
            )
            await park(account, message.content, why, DEFAULT_PARKED_CONTAINER, tokens=tokens)
            await queue.delete(message.id, message.pop_receipt)
            parked += 1
    return parked


@contextlib.contextmanager
def console(environ: dict[str, str], workdir: Path) -> Iterator[str]:
    """``bus console`` on the demo's storage until the block ends; its address."""
    with started_console(workdir, environ, "--by", OPERATOR) as started:
        yield started.address


def photograph(address: str, out: Path) -> list[Path]:
    """The overview, the failed messages by group and one of them, as PNG files in ``out``."""
    binary = chromium()
    if binary is None:
        raise SystemExit("chromium is not installed (make chromium)")
    out.mkdir(parents=True, exist_ok=True)
    shots = [out / f"console-{name}.png" for name in ("overview", "failed", "message")]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=list(CHROMIUM_FLAGS))
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(60_000)
        page.goto(address)
        _drawn(page, "#endpoint-table")
        _shoot(page, shots[0])
        page.set_viewport_size(SHORT)  # the next views are short: no empty page below
        page.get_by_role("link", name="Failed messages").click()
        _drawn(page, "#groups tbody tr")
        _shoot(page, shots[1])
        page.locator("#groups tbody tr").first.locator("td.num a").click()
        page.locator("#failed-list tbody tr a.id").first.click()
        _drawn(page, "#body")
        _shoot(page, shots[2])
        browser.close()
    return shots


def _drawn(page: Page, selector: str) -> None:
    """Wait for ``selector``; an error the page shows instead ends the script with it."""
    page.locator(f"{selector}, #banner:not([hidden])").first.wait_for()
    if page.locator("#banner").is_visible():
        raise SystemExit(f"the console shows an error: {page.locator('#banner-text').inner_text()}")


def _shoot(page: Page, path: Path) -> None:
    page.evaluate("document.fonts.ready")
    page.screenshot(path=str(path), full_page=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lab.local.console_shot", description=__doc__)
    d = Options()
    p.add_argument("--out", type=Path, default=OUT, help="folder of the PNG files")
    p.add_argument("--orders", type=int, default=d.orders)
    p.add_argument("--shots", type=int, default=d.shots)
    p.add_argument("--no-postgres", action="store_true", help="payments on Table Storage too")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    options = Options(orders=args.orders, shots=args.shots)
    workdir = Path(tempfile.mkdtemp(prefix="bus-console-shot-"))
    os.environ[PAYMENTS_STORE] = "table" if args.no_postgres else "postgres"
    try:
        with contextlib.ExitStack() as running:
            endpoints = running.enter_context(Azurite(location=str(workdir / "azurite")))
            url = None if args.no_postgres else running.enter_context(PostgresServer())
            faults = provider_args(
                options.provider_faults, options.provider_late_seconds, options.seed
            )
            credential = secrets.token_urlsafe(24)
            address = running.enter_context(
                provider_process(workdir, credential=credential, args=faults)
            )
            provider = Provider(address, credential)
            cs = endpoints.connection_string
            print("console shot: the demo's run")
            verdict = asyncio.run(drive(cs, options, workdir, url, provider))
            print(verdict.line())
            settings = {
                APP_SETTING: DEMO_APP,
                **provider.app_settings(),
                **({} if url is None else {URL_SETTING: url}),
            }
            parked = asyncio.run(park_failures(cs, settings))
            print(f"console shot: {parked} messages parked as failed handlers park them")
            environ = {
                **inherited_environ(),
                **settings,
                DEFAULT_SETTING: cs,
                "PYTHONPATH": str(REPO_ROOT),
            }
            with console(environ, workdir) as page_address:
                shots = photograph(page_address, args.out)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    load = " ".join(f"{n:.2f}" for n in os.getloadavg())
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for shot in shots:
        print(f"console shot: {shot} ({stamp}, load average {load})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
