"""``bus console`` started as the operator starts it: a real process on a free port, its
address read from the one line it prints, stopped with SIGINT (as Ctrl-C stops it)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lab.local.azurite import REPO_ROOT
from lab.local.console_process import started_console
from shared.app_loader import APP_SETTING
from tests.conftest import SAMPLE_APP, sample_provider_settings


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
    with started_console(folder, environ, *args) as started:
        yield RunningConsole(started.base, started.token, started.process)
