"""``python -m lab.provider``: serve the local payment provider on a port.

The credential is read from the environment variable ``LAB_PROVIDER_CREDENTIAL`` (not an
argument, which any user of the machine can read in the process list); without it every
caller is accepted. ``--ledger FILE`` keeps the books in that file across restarts. It
prints ``provider: ready port=N`` once it serves, and stops on SIGTERM or Ctrl-C, exiting 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from pydantic import ValidationError

from lab.provider.faults import FAULTS, FaultSettings
from lab.provider.server import PaymentProvider, serving
from shared.errors import ConfigurationError
from shared.logsafe import problems, shown

CREDENTIAL_VARIABLE = "LAB_PROVIDER_CREDENTIAL"
READY_MARK = "provider: ready port="
EXIT_CONFIGURATION = 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab.provider",
        description="A local payment provider with Stripe-like idempotency keys and faults.",
    )
    p.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--ledger", type=Path, help="JSON file that keeps the books across restarts")
    for fault in FAULTS:
        p.add_argument(f"--{fault}-rate", type=float, default=0.0, help="share of the calls")
        p.add_argument(f"--{fault}-count", type=int, default=0, help="the next N calls")
    p.add_argument(
        "--late-seconds",
        type=float,
        default=30.0,
        help="how long a late answer waits (its key answers 409 in progress meanwhile)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the fault rates")
    return p


def fault_settings(args: argparse.Namespace) -> FaultSettings:
    switches = {
        fault: {"rate": getattr(args, f"{fault}_rate"), "count": getattr(args, f"{fault}_count")}
        for fault in FAULTS
    }
    return FaultSettings.model_validate(
        {**switches, "late_seconds": args.late_seconds, "seed": args.seed}
    )


async def serve(provider: PaymentProvider, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with serving(provider, port, host) as url:
        print(f"{READY_MARK}{url.rsplit(':', 1)[1]}", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        provider = PaymentProvider(
            credential=os.environ.get(CREDENTIAL_VARIABLE) or None,
            faults=fault_settings(args),
            ledger_file=args.ledger,
        )
    except ValidationError as error:
        print(f"provider: {problems(error, 'fault settings')}", file=sys.stderr)
        return EXIT_CONFIGURATION
    except ConfigurationError as error:
        print(f"provider: {shown(error)}", file=sys.stderr)
        return EXIT_CONFIGURATION
    asyncio.run(serve(provider, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
