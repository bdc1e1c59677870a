"""``bus verify``'s options, and its run: the engine is the simulator's (``lab.verify``),
imported only when this command runs, so no other command and never the deployed app loads
the lab (the package ships it; ``tests/test_deployed_app.py``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shared.bus import BusApp

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
    from lab.verify.command import run  # the lab, for this command only

    return run(args, app, app_reference, sys.stdout)
