"""``bus console`` started as the operator starts it: a real process on a free port, its
address read from the one line it prints, stopped with SIGINT (as Ctrl-C stops it)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lab.local.azurite import REPO_ROOT
from shared.app_loader import APP_SETTING
from tests.conftest import SAMPLE_APP, sample_provider_settings

LINE = re.compile(r"console: (http://127\.0\.0\.1:(\d+))/\?token=([A-Za-z0-9_-]+)\n")
START_SECONDS = 60


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class RunningConsole:
    base: str
    token: str
    process: subprocess.Popen[str]
    stderr: list[str] = field(default_factory=list)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        token: str | None = "",
    ) -> Answer:
        """``method path`` with the console's token as a bearer token (``token`` None: none;
        a string: that one instead), over real HTTP."""
        sent = dict(headers or {})
        bearer = self.token if token == "" else token
        if bearer is not None:
            sent.setdefault("Authorization", f"Bearer {bearer}")
        request = urllib.request.Request(self.base + path, data=body, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                return Answer(answer.status, dict(answer.headers.items()), answer.read())
        except urllib.error.HTTPError as e:
            return Answer(e.code, dict(e.headers.items()), e.read())

    def get(self, path: str, **kwargs: Any) -> Answer:
        return self.request("GET", path, **kwargs)

    def session(self) -> dict[str, Any]:
        answer = self.get("/api/session")
        assert answer.status == 200, answer.body
        session: dict[str, Any] = answer.json()
        return session

    def post(self, path: str, value: object, *, csrf: str | None = "", **kwargs: Any) -> Answer:
        """A JSON action with the session's CSRF value (``csrf`` None: none; a string: that
        one instead)."""
        headers = {"Content-Type": "application/json", **kwargs.pop("headers", {})}
        value_csrf = self.session()["csrf"] if csrf == "" else csrf
        if value_csrf is not None:
            headers["X-Console-CSRF"] = value_csrf
        body = json.dumps(value).encode()
        return self.request("POST", path, body=body, headers=headers, **kwargs)

    @property
    def port(self) -> int:
        return urlsplit(self.base).port or 0


def console_environ(connection_string: str, **more: str) -> dict[str, str]:
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("BUS_", "AzureWebJobsStorage", "PYTEST_"))
    }
    return {
        **inherited,
        "PYTHONPATH": str(REPO_ROOT),
        APP_SETTING: SAMPLE_APP,
        **sample_provider_settings(),
        "AzureWebJobsStorage": connection_string,
        **more,
    }


@contextlib.contextmanager
def running_console(folder: Path, environ: dict[str, str], *args: str) -> Iterator[RunningConsole]:
    """``bus console --port 0 ARGS`` in ``folder``, until the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "shared.cli", "console", "--port", "0", *args],
        cwd=folder,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = _first_line(process)
        found = LINE.fullmatch(line)
        if found is None:
            raise AssertionError(f"unexpected first line {line!r}: {process.stderr.read()}")  # type: ignore[union-attr]
        yield RunningConsole(found[1], found[3], process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _first_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if selector.select(timeout=0.5):
                return process.stdout.readline()
            if process.poll() is not None:
                break
    assert process.stderr is not None
    raise AssertionError(f"bus console did not start: {process.stderr.read()}")
