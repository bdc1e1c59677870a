"""``bus cancel --key K [--scope S]`` against Azurite (issue 46): what ``bus send`` or the HTTP
ingress sent under a key, cancelled unless it was processed already."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.local.azurite import AzuriteEndpoints
from tests.cli.in_process import Run, in_process
from tests.conftest import started_azurite

pytestmark = pytest.mark.azurite

ORDER = '{"order_id": "x1", "customer": "ada", "amount_cents": 700}'


@pytest.fixture(scope="module")
def emulator() -> Iterator[AzuriteEndpoints]:
    yield from started_azurite()  # private: the sample app's tables have fixed names


@pytest.fixture
def bus(
    emulator: AzuriteEndpoints,
    sample_project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Run:
    monkeypatch.setenv("AzureWebJobsStorage", emulator.connection_string)
    monkeypatch.delenv("BUS_STORAGE_SETTING", raising=False)
    run = in_process(capsys, "--no-progress")
    assert run("provision")[0] == 0
    return run


def test_a_delayed_send_is_cancelled_by_its_key_and_answers_so_again(bus: Run) -> None:
    code, out, _ = bus("send", "PlaceOrder", "--delay", "1h", "--key", "c-1", "--body", ORDER)
    assert code == 0
    [message_id] = json.loads(out)["message_ids"]
    expected = {
        "idempotency_key": "c-1",
        "outcome": "cancelled",
        "messages": {message_id: "cancelled"},
    }
    for _ in range(2):
        code, out, err = bus("cancel", "--key", "c-1")
        assert (code, json.loads(out)) == (0, expected), err


def test_a_key_of_another_scope_or_never_used_is_not_found(bus: Run) -> None:
    assert bus("send", "PlaceOrder", "--delay", "1h", "--key", "c-2", "--body", ORDER)[0] == 0
    for args in (["--key", "c-2", "--scope", "http"], ["--key", "never-sent"]):
        code, out, _ = bus("cancel", *args)
        assert code == 1
        assert "nothing was sent under key" in out
    code, _, err = bus("cancel", "--key", "c-2", "--scope", "a|b")
    assert code == 2
    assert "sender scope" in err
