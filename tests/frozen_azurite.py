"""An emulator of its own that a test can freeze (SIGSTOP) and resume (SIGCONT), as a storage
account that stops answering without closing its connections. Never the session-wide
emulator: the other tests share that one."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest

from lab.local.azurite import Azurite, AzuriteEndpoints
from shared.errors import ConfigurationError
from tests.conftest import UNDER_CI


class FreezableAzurite:
    def __init__(self) -> None:
        self.emulator = Azurite()
        self.endpoints: AzuriteEndpoints | None = None

    @property
    def connection_string(self) -> str:
        if self.endpoints is None:
            raise ConfigurationError("the emulator is not started")
        return self.endpoints.connection_string

    def _signal(self, number: signal.Signals) -> None:
        process = self.emulator.process
        if process is None:
            raise ConfigurationError("the emulator is not running")
        os.killpg(process.pid, number)

    def freeze(self) -> None:
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Frozen for the block; resumed whatever happens in it."""
        self.freeze()
        try:
            yield
        finally:
            self.thaw()


def started_freezable() -> Iterator[FreezableAzurite]:
    azurite = FreezableAzurite()
    try:
        azurite.endpoints = azurite.emulator.start()
    except ConfigurationError as e:
        if UNDER_CI:
            pytest.fail(f"Azurite is required under CI and could not start: {e}")
        pytest.skip(f"Azurite unavailable (run `make deps`): {e}")
    try:
        yield azurite
    finally:
        with contextlib.suppress(ProcessLookupError, ConfigurationError):
            azurite.thaw()  # a stopped process cannot act on the SIGTERM that stops it
        azurite.emulator.stop()
