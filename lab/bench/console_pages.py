"""``python -m lab.bench.console_pages [--parked N] [--size S]``: what paging through parked
messages in the console costs.

It starts Azurite, provisions the sample app, parks N messages in the payments poison queue
(wrappers as the bus writes them), starts ``bus console`` and times, over HTTP: the first
page (one pass that receives the whole queue), the next page (cut from that pass), every
page in turn, the groups (a fresh pass) and the overview. Figures only: nothing here asserts
a time; run ``uptime`` beside it, the machine's load moves them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from lab.local.azurite import REPO_ROOT, Azurite, AzuriteEndpoints
from shared.app_loader import APP_SETTING, DEFAULT_APP
from shared.bus.poison import Reason, poison_body
from shared.resources import RESOURCES_FILE, poison_queue, resources_for, resources_json
from shared.sample.app import app as sample_app
from shared.settings import StorageSettings
from shared.stores.azure import AzureStorageAccount

LINE = re.compile(r"console: (http://[^/]+)/\?token=(\S+)")
SETTINGS = {APP_SETTING: DEFAULT_APP, "BUS_SERVICE_PROVIDER_URL": "http://127.0.0.1:9"}
"""The sample app declares a payment provider; the console never calls it."""


def parked(i: int) -> str:
    why = Reason(
        "payments",
        f"failure {i}",
        5,
        error_type=("KeyError", "TimeoutError", "ValueError")[i % 3],
        message_id=f"m-{i}",
        message_type=("ChargePayment", "RefundPayment")[i % 2],
    )
    return poison_body(json.dumps({"message_id": f"m-{i}"}), why)


async def park(endpoints: AzuriteEndpoints, count: int) -> None:
    async with AzureStorageAccount(StorageSettings(endpoints.connection_string)) as account:
        poison = account.queue(poison_queue("payments"))
        for start in range(0, count, 50):
            await asyncio.gather(*(poison.send(parked(i)) for i in range(start, start + 50)))


def environ(endpoints: AzuriteEndpoints) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("BUS_")}
    return {
        **inherited,
        "PYTHONPATH": str(REPO_ROOT),
        "AzureWebJobsStorage": endpoints.connection_string,
        **SETTINGS,
    }


def timed(base: str, token: str, path: str) -> tuple[float, dict[str, object]]:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as answer:
        value: dict[str, object] = json.load(answer)
    return time.monotonic() - started, value


def measure(base: str, token: str, size: int) -> None:
    first, page = timed(base, token, f"/api/failed?size={size}")
    print(f"first page of {size} (a pass over {page['total']}): {first:.2f} s")
    following, _ = timed(base, token, f"/api/failed?size={size}&skip={size}")
    print(f"the next page (cut from that pass): {following:.3f} s")
    started, skip = time.monotonic(), 0
    while True:
        _, page = timed(base, token, f"/api/failed?size={size}&skip={skip}")
        skip += size
        if skip >= int(str(page["total"])):
            break
    print(f"every page of {size} in turn: {time.monotonic() - started:.2f} s")
    print(f"groups (a fresh pass): {timed(base, token, '/api/failed/groups')[0]:.2f} s")
    print(f"overview: {timed(base, token, '/api/overview')[0]:.2f} s")


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--parked", type=int, default=500)
    options.add_argument("--size", type=int, default=100)
    args = options.parse_args()
    emulator = Azurite()
    endpoints = emulator.start()
    try:
        folder = Path(tempfile.mkdtemp(prefix="console-bench-"))
        (folder / RESOURCES_FILE).parent.mkdir(parents=True)
        app_resources = resources_for(sample_app.running_endpoints())
        (folder / RESOURCES_FILE).write_text(resources_json(app_resources))
        env = environ(endpoints)
        command = [sys.executable, "-m", "shared.cli"]
        subprocess.run([*command, "provision"], cwd=folder, env=env, check=True)
        asyncio.run(park(endpoints, args.parked))
        console = subprocess.Popen(
            [*command, "console", "--port", "0"],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert console.stdout is not None
            found = LINE.match(console.stdout.readline())
            if found is None:
                raise SystemExit("bus console did not start")
            measure(found[1], found[2], args.size)
        finally:
            console.terminate()
            console.wait()
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
