"""How the console is served: enabled in the deployed app, read-only, how its operator signs
in and so whose name it records.

Read from the ``BUS_CONSOLE_*`` app settings (``shared.app_settings``) into
``AppConfig.console`` (``shared.config``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.app_settings import CONSOLE_IDENTITIES

SECRET, ENTRA = CONSOLE_IDENTITIES


@dataclass(frozen=True)
class ConsoleSettings:
    enabled: bool = False
    """The deployed app serves the console (its HTTP function is bound)."""
    read_only: bool = False
    identity: str = SECRET
    """Deployed: ``secret`` (the operator presents ``secret``; who is "console secret") or
    ``entra`` (who is the name and object id App Service authentication sends; a request
    without them is refused)."""
    secret: str | None = field(default=None, repr=False)
    """BUS_CONSOLE_SECRET: required from every operator of the deployed console when set."""
    audit_scan_rows: int = 20000
    """Audit rows read per endpoint for the overview's throughput and latency, and session
    records for its counts of transactional sessions."""
    list_limit: int = 1000
    """Parked messages one listing pass reads per poison queue (console and ``bus poison
    list``)."""
