"""The local host checks storage before serving: wrong settings fail within seconds, saying
why, instead of queue workers waiting in silence."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.host.process import free_port
from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from shared.settings import DEV_KEY
from tests.conftest import sample_provider_settings, unique_name

pytestmark = pytest.mark.azurite


def start_host(
    folder: Path, *options: str, **settings: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("BUS_", "AzureWebJobsStorage"))
    }
    environ |= {
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(folder)]),
        "CLEANUP_SCHEDULE": "0 0 0 1 1 *",
        **sample_provider_settings(),  # the sample does not start without them
        **settings,
    }
    command = [sys.executable, "-m", "lab.host", "--app", str(REPO_ROOT / "function_app.py")]
    started = time.monotonic()
    result = subprocess.run(
        [*command, "--port", "0", *options],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result, time.monotonic() - started


def test_a_wrong_key_stops_the_host_at_once_saying_the_request_was_refused(
    azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    wrong = azurite.connection_string.replace(DEV_KEY, "d3Jvbmcga2V5")
    result, _ = start_host(tmp_path, AzureWebJobsStorage=wrong)
    assert result.returncode == 3
    assert "host: configuration error: storage refused the request" in result.stderr
    assert "host: ready" not in result.stdout


def test_an_unprovisioned_app_stops_the_host_saying_run_bus_provision(
    azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    package, endpoint = unique_name("shop"), unique_name("stock")
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "app.py").write_text(
        f"from shared.bus import BusApp\napp = BusApp()\napp.endpoint({endpoint!r})\n"
    )
    result, _ = start_host(
        tmp_path, AzureWebJobsStorage=azurite.connection_string, BUS_APP=f"{package}.app:app"
    )
    assert result.returncode == 3
    assert "resources missing in AzureWebJobsStorage" in result.stderr
    assert f"queues {endpoint}; run `bus provision`" in result.stderr


def test_storage_nobody_listens_on_stops_the_host_within_seconds(tmp_path: Path) -> None:
    port = free_port()
    nowhere = (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={DEV_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
        f"QueueEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
        f"TableEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
    )
    # Refused connections are retried until the storage call times out: with short
    # timeouts (BUS_STORAGE_*, as an operator sets them) the check gives up sooner.
    result, seconds = start_host(
        tmp_path,
        AzureWebJobsStorage=nowhere,
        BUS_STORAGE_CONNECT_TIMEOUT="1",
        BUS_STORAGE_READ_TIMEOUT="1",
        BUS_STORAGE_CALL_TIMEOUT="2",
    )
    assert result.returncode == 3
    assert "host: configuration error: storage unreachable" in result.stderr
    assert seconds < 30


def test_a_copied_settings_file_beside_azure_uris_in_the_shell_stops_the_host(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "local.settings.json"
    shutil.copy(REPO_ROOT / "local.settings.sample.json", settings)
    uris = {
        f"AzureWebJobsStorage__{kind}ServiceUri": f"https://prodshop.{kind}.core.windows.net"
        for kind in ("blob", "queue", "table")
    }

    result, _ = start_host(tmp_path, "--settings", str(settings), **uris)

    assert result.returncode == 3
    assert (
        "host: configuration error: ambiguous storage connection: AzureWebJobsStorage is set as "
        f"a connection string in {settings}, and its account is also set by location"
    ) in result.stderr
    assert "host: ready" not in result.stdout
