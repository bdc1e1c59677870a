"""``python -m lab.provider`` as its own process: the credential from its environment, the
books kept in its ledger file across a restart, a damaged ledger file refused at start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from lab.provider.__main__ import EXIT_CONFIGURATION
from lab.provider.process import provider_process
from shared.errors import ConfigurationError
from tests.provider.client import CREDENTIAL, Answer, charge


async def post(url: str, key: str, credential: str = CREDENTIAL) -> Answer:
    headers = {"Idempotency-Key": key, "Authorization": f"Bearer {credential}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/charges", json=charge(), headers=headers) as response,
    ):
        return Answer(response.status, await response.json())


async def test_the_books_survive_a_restart_and_a_known_key_is_not_applied_again(
    tmp_path: Path,
) -> None:
    with provider_process(tmp_path, credential=CREDENTIAL) as url:
        first = await post(url, "k1")
        refused = await post(url, "k2", credential="guess")
    assert (first.status, refused.status) == (200, 401)
    saved = json.loads((tmp_path / "ledger.json").read_text())
    assert [entry["key"] for entry in saved["entries"]] == ["k1"]

    with provider_process(tmp_path, credential=CREDENTIAL) as url:
        again = await post(url, "k1")
        second = await post(url, "k2")
    assert again == first
    assert second.body["id"] == "ch_000002"
    saved = json.loads((tmp_path / "ledger.json").read_text())
    assert [entry["key"] for entry in saved["entries"]] == ["k1", "k2"]


def test_a_damaged_ledger_file_stops_it_at_start_saying_which(tmp_path: Path) -> None:
    (tmp_path / "ledger.json").write_text('{"entries": [{"kind": "gift\\u001b[2J"}]}')
    with (
        pytest.raises(ConfigurationError, match="cannot read the ledger"),
        provider_process(tmp_path, credential=None, timeout=20),
    ):
        pass
    log = (tmp_path / "provider.log").read_text()
    assert "\x1b" not in log
    done = subprocess.run(
        [sys.executable, "-m", "lab.provider", "--ledger", str(tmp_path / "ledger.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == EXIT_CONFIGURATION


def test_bad_fault_switches_stop_it_at_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lab.provider", "--drop-rate", "1.5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == EXIT_CONFIGURATION
    assert "drop.rate" in done.stderr
