"""``bus status --system FILE``: every app of a system, each read as ``bus status`` reads one
app, against its own state account (or database) and the shared messaging account.

An app whose accounts cannot be read is reported as such and the others still are: one
app's state account being down must not hide the rest of the system from its operator. The
exit code is the worst of the apps'."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from shared.cli import commands
from shared.cli.commands import (
    EXIT_CONFIGURATION,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNHEALTHY,
    print_json,
    say,
    say_status,
    status_exit,
)
from shared.cli.opened import opened_worker
from shared.errors import BusError, ConfigurationError, NotFound
from shared.logsafe import shown
from shared.system import LoadedApp, load_system

SEVERITY = (EXIT_OK, EXIT_UNHEALTHY, EXIT_FAILED, EXIT_CONFIGURATION)
"""Exit codes from the best to the worst: an app missing resources or its configuration is
worse than one that failed to answer, which is worse than poison messages waiting."""


async def system_status_command(
    path: Path, *, as_json: bool, check: bool, progress: bool | None
) -> int:
    apps = load_system(path).load()
    reports: dict[str, dict[str, Any]] = {}
    codes: list[int] = []
    for app in apps:
        report, code = await _app_status(app, check=check, progress=progress)
        reports[app.name] = report
        codes.append(code)
        if not as_json:
            say(f"app {app.name} ({app.entry.bus_app}):")
            if "error" in report:
                say(f"  not read: {report['error']}")
            else:
                say_status(report)
    if as_json:
        print_json({"apps": reports})
    return max(codes, key=SEVERITY.index)


async def _app_status(
    app: LoadedApp, *, check: bool, progress: bool | None
) -> tuple[dict[str, Any], int]:
    """One app's report and exit code, or the error that kept it from being read."""
    try:
        tool = f"bus (app {app.name})"
        async with opened_worker(app.app, app.config, require_resources=False, tool=tool) as w:
            report = await commands.app_status(w, progress)
    except (ConfigurationError, NotFound) as e:
        return _unread(app, e), EXIT_CONFIGURATION
    except BusError as e:
        return _unread(app, e), EXIT_FAILED
    return report, status_exit(report, check=check)


def _unread(app: LoadedApp, error: BusError) -> dict[str, Any]:
    message = shown(str(error), 2000)
    print(f"bus: app {app.name}: {message}", file=sys.stderr)
    return {"error": message}
