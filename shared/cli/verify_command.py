"""``bus verify``'s options, and its run.

The engine is the simulator's, which belongs to the lab (``lab.verify``), not to the product:
the product finds it through the entry point ``verify`` of the group ``ENGINES``, which the
package registers (pyproject.toml), and loads it only when this command runs. So no other
command and never the deployed app loads the lab (``tests/test_deployed_app.py``), the
library imports nothing of it, and an installation without the lab says what is missing
instead of failing on an import (``tests/test_installed_package.py``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TextIO

from shared.bus import BusApp
from shared.errors import ConfigurationError

ENGINES = "exactly_once_bus.engines"
"""The entry-point group where an installed package offers the engine of a command."""
Engine = Callable[[argparse.Namespace, BusApp, str | None, TextIO], int]

DEFAULT_BUDGET = 30.0


def add_verify_parser(sub: Any) -> None:
    """``sub``: the ``bus`` parser's subcommands (argparse keeps their type private)."""
    s: argparse.ArgumentParser = sub.add_parser(
        "verify",
        help="explore the app's endpoints under faults and duplicates (no storage needed)",
        description="Run the app's endpoints in the simulator: every schedule within small "
        "bounds, then random ones for --budget seconds (or --schedules runs), each checked "
        "against a fault-free "
        "run. Exit 0: no violation; 1: a violation (each with a seed to replay); 2: bad "
        "usage or inputs; 3: the app cannot be loaded. See docs/verify.md.",
    )
    s.add_argument(
        "--app",
        dest="verify_app",
        metavar="MODULE:ATTRIBUTE",
        help="the app to verify (as bus --app; default: BUS_APP, else the sample app)",
    )
    s.add_argument(
        "--examples",
        metavar="MODULE:ATTRIBUTE",
        help="the messages every run starts with (a list, or a function returning one); "
        "default: `examples` beside the app, else generated from the message models",
    )
    s.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET,
        help="seconds of exploration (default: %(default)s)",
    )
    s.add_argument(
        "--schedules",
        type=int,
        help="stop after this many schedules, or at --budget, whichever comes first: "
        "the same exploration on a loaded machine as on a quiet one",
    )
    s.add_argument("--seed", help="replay the one run a reported seed names, with its schedule")
    s.add_argument(
        "--first-seed", type=int, default=0, help="where random search starts (default: 0)"
    )
    s.add_argument("--stop-at-first", action="store_true", help="stop at the first violation")
    s.add_argument("--stats", action="store_true", help="print schedules per second and timings")
    s.add_argument("--trace", action="store_true", help="print each violating run's schedule")


def check_verify_usage(args: argparse.Namespace, usage: Any) -> None:
    if not args.budget > 0:
        usage("--budget must be a positive number of seconds")
    if args.schedules is not None and args.schedules <= 0:
        usage("--schedules must be a positive number")


def verify_command(args: argparse.Namespace, app: BusApp, app_reference: str | None) -> int:
    return verify_engine()(args, app, app_reference, sys.stdout)


def verify_engine() -> Engine:
    """The simulator's run of ``bus verify``, from the installed package's entry point."""
    missing = (
        "bus verify runs the simulator, which ships with the package's lab (the `lab` "
        "package beside `shared`): install the package with it (`pip install -e .` in the "
        "repository), see docs/verify.md"
    )
    found = entry_points(group=ENGINES, name="verify")
    if not found:
        raise ConfigurationError(f"{missing}; no engine is registered")
    try:
        engine: Engine = next(iter(found)).load()
    except ImportError as e:
        raise ConfigurationError(f"{missing}; the registered engine cannot be loaded: {e}") from e
    return engine
