"""The operator command line: ``bus`` (or ``python -m shared.cli``)."""

from shared.cli.main import main

__all__ = ["main"]
