"""How the console is served: enabled in the deployed app, read-only, whose name it records.

Read from the ``BUS_CONSOLE_*`` app settings (``shared.app_settings``) into
``AppConfig.console`` (``shared.config``)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.app_settings import CONSOLE_IDENTITIES

FUNCTION_KEY, ENTRA = CONSOLE_IDENTITIES


@dataclass(frozen=True)
class ConsoleSettings:
    enabled: bool = False
    """The deployed app serves the console (its HTTP function is bound)."""
    read_only: bool = False
    identity: str = FUNCTION_KEY
    """Deployed: ``function-key`` (who is "function key") or ``entra`` (who is the name App
    Service authentication sends; a request without it is refused)."""
    audit_scan_rows: int = 20000
    """Audit rows read per endpoint for the overview's throughput and latency."""
    list_limit: int = 1000
    """Parked messages one listing pass reads per poison queue (console and ``bus poison
    list``)."""
