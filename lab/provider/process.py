"""``python -m lab.provider`` as a child process of the demo and the tests: started with its
fault switches and a ledger file, stopped with SIGTERM. Its output goes to a log file, where
readiness (and its port) is read from, so nothing blocks on a pipe nobody drains."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from lab.provider.__main__ import CREDENTIAL_VARIABLE, READY_MARK
from shared.errors import ConfigurationError

CHECKOUT = Path(__file__).resolve().parents[2]
_READY = re.compile(re.escape(READY_MARK) + r"(\d+)")


@contextlib.contextmanager
def provider_process(
    workdir: Path,
    *,
    credential: str | None,
    args: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> Iterator[str]:
    """Run the provider with its books in ``workdir/ledger.json`` and its output in
    ``workdir/provider.log``; yields its base URL."""
    log_path = workdir / "provider.log"
    command = [sys.executable, "-m", "lab.provider", "--ledger", str(workdir / "ledger.json")]
    env = {**(environ if environ is not None else os.environ)}
    env.pop(CREDENTIAL_VARIABLE, None)
    if credential is not None:
        env[CREDENTIAL_VARIABLE] = credential
    path = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH")) if p)
    offset = log_path.stat().st_size if log_path.exists() else 0  # an earlier run's lines
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [*command, *args],
            cwd=workdir,
            env={**env, "PYTHONPATH": path},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{_ready_port(process, log_path, offset, timeout)}"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _ready_port(
    process: subprocess.Popen[bytes], log_path: Path, offset: int, timeout: float
) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _READY.search(log_path.read_bytes()[offset:].decode(errors="replace"))
        if found:
            return int(found.group(1))
        if process.poll() is not None:
            break
        time.sleep(0.05)
    tail = log_path.read_bytes()[offset:].decode(errors="replace")[-2000:]
    raise ConfigurationError(f"the payment provider did not become ready; its output:\n{tail}")
